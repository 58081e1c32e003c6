"""The crawl loop: fetching, politeness, per-site pacing."""
