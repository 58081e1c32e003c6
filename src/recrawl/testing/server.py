"""Helpers to run the service for tests: a real uvicorn server on 127.0.0.1.

Public so that fetcher integrations can be tested against the real service::

    with serve_in_thread(create_app(db, settings)) as base_url:
        httpx.post(f"{base_url}/v1/leases", ...)
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from fastapi import FastAPI

from recrawl.clock import ManualClock

__all__ = ["ManualClock", "free_port", "serve_in_thread"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve_in_thread(app: FastAPI, *, timeout_s: float = 10.0) -> Iterator[str]:
    """Run ``app`` on uvicorn in a daemon thread on a free port; yield its base URL.

    The server is shut down (gracefully) when the block exits.
    """
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", access_log=False, lifespan="off"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the server on port {port} did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout_s)
