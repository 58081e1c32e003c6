"""A client that closes its connection mid-body leaves one quiet log line, no
traceback, and nothing stored (issue 30, failure 5)."""

from __future__ import annotations

import logging
import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

from recrawl.config import Settings
from recrawl.engine.engine import Engine
from recrawl.service import create_app
from recrawl.store import open_store
from recrawl.testing.server import ManualClock, serve_in_thread

TOKEN = "write-secret"


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_a_client_gone_mid_body_is_one_quiet_line_and_stores_nothing(tmp_path: Path) -> None:
    settings = Settings(token=TOKEN, budget_per_day=100.0)
    store = open_store(str(tmp_path / "s.db"))
    seen = Records()
    names = ("uvicorn", "")  # uvicorn.error and uvicorn.access do not reach the root logger
    level = logging.getLogger("recrawl").level
    logging.getLogger("recrawl").setLevel(logging.INFO)
    try:
        engine = Engine(store, settings, clock=ManualClock())
        app = create_app(engine, settings, replan_min_s=0.0)
        with serve_in_thread(app) as base:
            # after uvicorn configured its logging (which drops handlers it did not set)
            for name in names:
                logging.getLogger(name).addHandler(seen)
            line = b'{"url": "https://a.example/", "fetched_at": 1000, "status": 200}\n'
            where = urlsplit(base)
            with socket.create_connection((where.hostname, where.port)) as s:
                s.sendall(
                    b"POST /v1/observations HTTP/1.1\r\n"
                    + f"Host: {where.netloc}\r\n".encode()
                    + f"Authorization: Bearer {TOKEN}\r\n".encode()
                    + b"Content-Type: application/x-ndjson\r\n"
                    + b"Content-Length: 100000\r\n\r\n"
                    + line * 10
                )
                time.sleep(0.2)  # the route is reading the body
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and not any(
                r.levelno >= logging.INFO and r.name.startswith(("recrawl", "uvicorn"))
                for r in seen.records
            ):
                time.sleep(0.02)
            time.sleep(0.2)  # anything logged after the first line
        loud = [r for r in seen.records if r.levelno >= logging.ERROR or r.exc_info]
        assert not loud, [(r.name, r.getMessage(), r.exc_info) for r in loud]
        said = [r for r in seen.records if r.levelno >= logging.INFO]
        assert len(said) == 1, [(r.name, r.getMessage()) for r in said]
        assert said[0].levelno <= logging.WARNING
        assert "disconnected" in said[0].getMessage()
        assert store.observation_count() == 0
    finally:
        for name in names:
            logging.getLogger(name).removeHandler(seen)
        logging.getLogger("recrawl").setLevel(level)
        store.close()
