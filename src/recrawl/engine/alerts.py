"""Alerts: a log line always, and a webhook POST to the owner it concerns.

Site health goes to the crawl's owner (``[alerts] crawl_owner``, or the
top-level ``webhook``): a site paused (critical), and a site turned degrading
when ``bands`` lists it. Parser health goes to the parser's owner
(``[alerts] parser_owner``): a site whose records stopped extracting turned
degrading or critical, while the site itself may be healthy. The decision
what to do next is theirs.

Deliveries go through :class:`AlertQueue`: a bounded queue and one
background thread that posts each alert, retrying a failed delivery (a
connection error, a timeout, a 5xx, 408 or 429) with exponential back-off,
so a slow or dead webhook never holds up ingest, leases or health
evaluation. Failures are logged, never raised. At exit the queue is given a
few seconds to deliver what it holds (a one-shot ``recrawl health``).
"""

from __future__ import annotations

import atexit
import json
import logging
import queue
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Alert", "AlertQueue", "alert_events", "log_alert"]

log = logging.getLogger("recrawl.alerts")

_RETRY_STATUS = frozenset({408, 429})


@dataclass(frozen=True)
class Alert:
    """One alert: where it goes (``url``, None: logged only) and its JSON body."""

    url: str | None
    body: dict[str, Any] = field(default_factory=dict)


def alert_events(
    reports: Sequence[Mapping[str, Any]],
    before: Mapping[str, tuple[str, str]],
    *,
    paused: Sequence[str],
    crawl_owner: str | None,
    parser_owner: str | None,
    bands: Sequence[str] = ("critical",),
    at: float,
) -> list[Alert]:
    """The alerts one health evaluation raises (pure).

    ``reports`` are the evaluation's site reports (``recrawl health --json``
    rows), ``before`` each site's band and parser band before it, ``paused``
    the sites this evaluation paused. A pause always alerts the crawl owner
    (``site_paused``); a site entering degrading does when ``bands`` lists
    ``degrading`` (``site_degrading``); a site's parser band entering
    degrading or critical alerts the parser owner (``parser_degrading``,
    ``parser_critical``). Nothing alerts twice for the same band.
    """
    out: list[Alert] = []
    paused_set = set(paused)
    for r in reports:
        site = str(r["site"])
        band, pband = before.get(site, ("unknown", "unknown"))
        if site in paused_set:
            out.append(Alert(crawl_owner, {"event": "site_paused", "site": site, "at": at,
                                           "health": dict(r)}))  # fmt: skip
        elif r["band"] == "degrading" and band != "degrading" and "degrading" in bands:
            out.append(Alert(crawl_owner, {"event": "site_degrading", "site": site, "at": at,
                                           "health": dict(r)}))  # fmt: skip
        parser = r.get("parser") or {}
        now_p = parser.get("band", "unknown")
        if now_p in ("degrading", "critical") and now_p != pband:
            out.append(Alert(parser_owner, {"event": f"parser_{now_p}", "site": site, "at": at,
                                            "parser": dict(parser), "health": dict(r)}))  # fmt: skip
    return out


def log_alert(alert: Alert) -> None:
    """The log line every alert gets, delivered or not (WARNING, ``recrawl.alerts``):
    ``site a.example paused: health 28 (hard_block, challenge); a human decides
    what happens next``."""
    b = alert.body
    event = str(b.get("event", ""))
    parser = event.startswith("parser_")
    what = (b.get("parser") if parser else b.get("health")) or {}
    state = {"site_paused": "paused", "site_degrading": "degrading"}.get(event, event)
    log.warning(
        "%s %s %s: %s %s (%s); a human decides what happens next%s",
        "parser of site" if parser else "site",
        b.get("site"),
        event.removeprefix("parser_") if parser else state,
        "parser score" if parser else "health",
        what.get("score"),
        ", ".join(what.get("reasons") or []) or "no reasons",
        "" if alert.url else " (no webhook configured)",
    )


class AlertQueue:
    """Deliver alerts in the background, retrying failures (see the module).

    Parameters
    ----------
    retries
        Further attempts after a failed delivery.
    backoff_s
        Wait before the first retry, seconds; doubled at each retry (at most 60 s).
    timeout_s
        Timeout of one POST, seconds.
    size
        Alerts held at most; past it the new one is logged and dropped.
    """

    def __init__(
        self, *, retries: int = 5, backoff_s: float = 1.0, timeout_s: float = 5.0, size: int = 1000
    ) -> None:
        self.retries, self.backoff_s, self.timeout_s = retries, backoff_s, timeout_s
        self._q: queue.Queue[Alert] = queue.Queue(maxsize=size)
        self._pending = 0
        self._cv = threading.Condition()
        self.delivered = 0
        self.failed = 0
        self._thread = threading.Thread(target=self._run, name="recrawl-alerts", daemon=True)
        self._thread.start()
        atexit.register(self.drain, 5.0)

    def post(self, alert: Alert) -> None:
        """Log ``alert`` and queue its delivery; never blocks."""
        log_alert(alert)
        b = alert.body
        if not alert.url:
            return
        with self._cv:
            self._pending += 1
        try:
            self._q.put_nowait(alert)
        except queue.Full:
            with self._cv:
                self._pending -= 1
                self._cv.notify_all()
            log.error("alert queue full: %s for %s dropped", b.get("event"), b.get("site"))

    def drain(self, timeout: float) -> bool:
        """Wait until every queued alert was delivered or given up (True), at
        most ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while self._pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
        return True

    def _run(self) -> None:
        while True:
            alert = self._q.get()
            try:
                ok = self._deliver(alert)
            finally:
                with self._cv:
                    self._pending -= 1
                    if ok:
                        self.delivered += 1
                    else:
                        self.failed += 1
                    self._cv.notify_all()

    def _deliver(self, alert: Alert) -> bool:
        assert alert.url is not None
        data = json.dumps(alert.body).encode()
        wait = self.backoff_s
        for attempt in range(self.retries + 1):
            req = urllib.request.Request(
                alert.url, data=data, headers={"Content-Type": "application/json"}, method="POST"
            )
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    if 200 <= resp.status < 300:
                        return True
                    error = f"HTTP {resp.status}"
                    retry = resp.status >= 500 or resp.status in _RETRY_STATUS
            except urllib.error.HTTPError as exc:
                error = f"HTTP {exc.code}"
                retry = exc.code >= 500 or exc.code in _RETRY_STATUS
            except OSError as exc:  # refused, reset, timed out, name not found
                error, retry = str(exc), True
            if not retry or attempt == self.retries:
                log.error(
                    "alert webhook %s failed (%s) after %d attempt(s): %s for %s not delivered",
                    alert.url, error, attempt + 1, alert.body.get("event"), alert.body.get("site"),
                )  # fmt: skip
                return False
            time.sleep(wait)
            wait = min(wait * 2, 60.0)
        return False  # pragma: no cover - the loop returns
