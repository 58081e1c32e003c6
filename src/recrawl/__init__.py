"""recrawl: decide what a long-running crawler should fetch next under a budget,
and notice when a site starts pushing back.

The names a user needs are re-exported here; the implementation lives in the
subpackages, laid out as the data flows (``observe`` → ``estimate`` → ``plan``,
``health``; ``store`` keeps the state, ``engine`` joins them):

>>> import recrawl
>>> round(float(recrawl.freshness_gain(1.0, 1.0, 1.0)), 3)
0.4
>>> issubclass(recrawl.InvalidObservation, (recrawl.Error, ValueError))
True

Importing ``recrawl`` loads no edge: the HTTP service (``recrawl.service``,
FastAPI), the dashboard (``recrawl.report``, Plotly) and the crawl loop
(``recrawl.crawl``, httpx) are imported from their own packages.
"""

from __future__ import annotations

__version__ = "0.1.0"

from recrawl._exceptions import (
    ClusterUnreachable,
    ConfigError,
    Error,
    InvalidDocument,
    InvalidHint,
    InvalidObservation,
    InvalidTrace,
    NotFound,
    StoreError,
    StoreFull,
)
from recrawl.clock import Clock, ManualClock, ScaledClock, system_clock
from recrawl.config import CrawlSettings, Reserves, Settings, load_settings
from recrawl.engine.engine import Engine, PlanResult
from recrawl.engine.ingest import IngestReport
from recrawl.estimate.calibration import Calibration, calibration_report, revisit_predictions
from recrawl.estimate.hints import Hint, read_sitemap, source_trust
from recrawl.estimate.rates import estimate_rates
from recrawl.health.score import (
    HealthConfig,
    SiteHealth,
    Window,
    band_for,
    evaluate_sites,
    reference_health_score,
)
from recrawl.observe.fingerprint import FieldRule, fingerprint
from recrawl.observe.observation import (
    Observation,
    normalize_url,
    parse_observation,
    read_observations,
)
from recrawl.observe.traces import Trace, load_traces
from recrawl.plan.freshness import (
    Allocation,
    budget_for_freshness,
    freshness_gain,
    optimal_allocation,
)
from recrawl.plan.planner import PlannerConfig, plan_cycle
from recrawl.sim.replay import generate_traces, replay
from recrawl.store import (
    BatchResult,
    PostgresStore,
    SQLiteStore,
    Store,
    default_db,
    open_store,
)

__all__ = [
    "Allocation",
    "BatchResult",
    "Calibration",
    "Clock",
    "ClusterUnreachable",
    "ConfigError",
    "CrawlSettings",
    "Engine",
    "Error",
    "FieldRule",
    "HealthConfig",
    "Hint",
    "IngestReport",
    "InvalidDocument",
    "InvalidHint",
    "InvalidObservation",
    "InvalidTrace",
    "ManualClock",
    "NotFound",
    "Observation",
    "PlanResult",
    "PlannerConfig",
    "PostgresStore",
    "Reserves",
    "SQLiteStore",
    "ScaledClock",
    "Settings",
    "SiteHealth",
    "Store",
    "StoreError",
    "StoreFull",
    "Trace",
    "Window",
    "__version__",
    "band_for",
    "budget_for_freshness",
    "calibration_report",
    "default_db",
    "estimate_rates",
    "evaluate_sites",
    "fingerprint",
    "freshness_gain",
    "generate_traces",
    "load_settings",
    "load_traces",
    "normalize_url",
    "open_store",
    "optimal_allocation",
    "parse_observation",
    "plan_cycle",
    "read_observations",
    "read_sitemap",
    "reference_health_score",
    "replay",
    "revisit_predictions",
    "source_trust",
    "system_clock",
]
