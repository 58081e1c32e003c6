"""The service's routes, one :class:`~fastapi.APIRouter` per area.

Each module has ``router(svc, guards)``: the routes over one
:class:`~recrawl.service.state.Service`, behind the token checks of
:class:`~recrawl.service.auth.Guards`. A route is a library call and an
answer: errors are raised as :class:`recrawl.Error` and answered by
:mod:`recrawl.service.responses`.

* :mod:`.fetchers`: what fetchers write (URLs, leases, observations, hints);
* :mod:`.sites`: site health and controls, pages;
* :mod:`.model`: plan, budget, calibration, hint trust, stats;
* :mod:`.ops`: metrics, liveness, the dashboard.
"""

from __future__ import annotations

from recrawl.service.routes import fetchers, model, ops, sites

__all__ = ["fetchers", "model", "ops", "sites"]
