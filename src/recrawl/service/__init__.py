"""The HTTP service: fetchers lease work and report results over HTTP.

A thin edge over :class:`recrawl.engine.Engine`: :func:`create_app` builds a
FastAPI application (OpenAPI at ``/docs`` and ``/openapi.json``) with the
versioned API under ``/v1``, Prometheus metrics at ``/metrics``, a liveness
probe at ``/healthz`` and the dashboard at ``/``. ``recrawl serve`` runs it on
uvicorn; ``recrawl report`` writes the dashboard to one self-contained file.
"""

from __future__ import annotations

from recrawl.service.app import create_app
from recrawl.service.state import Service

__all__ = ["Service", "create_app"]
