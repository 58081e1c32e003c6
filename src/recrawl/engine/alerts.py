"""Alerts: a log line always, and a webhook POST when one is configured.

Alerts tell the site's owner that a site was paused; the decision what to do
next is theirs. Delivery failures are logged, never raised: a dead webhook must
not stop the crawl's own bookkeeping.
"""

from __future__ import annotations

import json
import logging
import urllib.request
from typing import Any

__all__ = ["send_alert"]

log = logging.getLogger("recrawl.alerts")


def send_alert(
    webhook: str | None, *, site: str, at: float, report: dict[str, Any], timeout_s: float = 5.0
) -> bool:
    """Log the pause of ``site`` and POST it as JSON to ``webhook``; True when delivered."""
    reasons = ", ".join(report.get("reasons") or []) or "none"
    log.warning(
        "site %s paused: health %s (%s); a human decides what happens next",
        site,
        report.get("score"),
        reasons,
    )
    if not webhook:
        return False
    body = json.dumps({"event": "site_paused", "site": site, "at": at, "health": report}).encode()
    req = urllib.request.Request(
        webhook, data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return bool(200 <= resp.status < 300)
    except OSError as exc:
        log.error("alert webhook %s failed: %s", webhook, exc)
        return False
