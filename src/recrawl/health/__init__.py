"""How each site is doing against its own normal: scores, buckets, canaries. Pure."""
