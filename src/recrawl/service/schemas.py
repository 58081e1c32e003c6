"""The request and response bodies of the service, as pydantic models.

Request models validate what comes in. Response models describe in
``/openapi.json`` what goes out: the routes answer with the library's own
documents (the ``as_dict()`` of :class:`~recrawl.engine.engine.PlanResult`,
:class:`~recrawl.engine.engine.BudgetOutlook`, :mod:`recrawl.engine.results`,
the same as the CLI's ``--json``), written by orjson (NaN and infinities as
null), not re-serialised through these models; the service tests check real
answers against them (``extra="forbid"``: a key the model does not name fails).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from recrawl.engine.engine import url_registration
from recrawl.observe.observation import normalize_url
from recrawl.service.leases import MAX_LEASE

__all__ = [
    "ERROR_RESPONSES",
    "MAX_URLS",
    "OBSERVATIONS_BODY",
    "URLS_BODY",
    "BudgetDoc",
    "CalibrationDoc",
    "CanariesDoc",
    "CanaryDoc",
    "CanaryRemoveRequest",
    "CanaryRemoved",
    "CanaryRequest",
    "ErrorBody",
    "Healthz",
    "HintReportDoc",
    "HintsAnswer",
    "IngestAnswer",
    "LeaseRequest",
    "Leases",
    "PageInfo",
    "PagesDoc",
    "PauseAnswer",
    "PauseRequest",
    "PlanDoc",
    "ResumeAnswer",
    "SiteDetailDoc",
    "SitesDoc",
    "StatsDoc",
    "UrlBatch",
    "UrlIn",
    "UrlList",
    "UrlRejected",
    "UrlsAdded",
    "UrlsRemoved",
    "ValidationErrorBody",
    "ValidatorsAnswer",
    "ValidatorsRequest",
]


class Doc(BaseModel):
    """A response document: every key it has is named here."""

    model_config = ConfigDict(extra="forbid")


def _registrable(url: str) -> str:
    """``url`` if it may be registered (an absolute http(s) URL), else ValueError."""
    url_registration({"url": url})
    return url


# -- request and response bodies (for validation and the OpenAPI description) ---------------


MAX_URLS = 100_000
"""URLs one ``POST /v1/urls`` or ``/v1/urls/remove`` may carry."""


class UrlIn(BaseModel):
    """A URL to discover: ``value`` is its business weight (≥ 0, default 1).
    Validated as ``recrawl urls add`` validates a row (an absolute http(s) URL;
    page type ``canary`` is reserved for canaries)."""

    url: str
    site: str | None = None
    page_type: str | None = None
    value: float = Field(1.0, ge=0)

    @model_validator(mode="after")
    def _registrable(self) -> UrlIn:
        url_registration({"url": self.url, "page_type": self.page_type, "value": self.value})
        return self


class UrlBatch(BaseModel):
    """URLs to register, as an object; with ``update``, the known ones among
    them that carry a ``value`` take it (a re-tiering). Each item is a URL
    string or a :class:`UrlIn` object."""

    urls: list[UrlIn | str] = Field(..., max_length=MAX_URLS)
    update: bool = False


_URL_ITEM: dict[str, Any] = {
    "anyOf": [
        {"type": "string", "description": "An absolute http(s) URL."},
        {
            "type": "object",
            "title": "UrlIn",
            "required": ["url"],
            "properties": {
                "url": {"type": "string"},
                "site": {"type": "string"},
                "page_type": {"type": "string"},
                "value": {"type": "number", "minimum": 0, "default": 1},
            },
        },
    ]
}

URLS_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "URLs to register: a JSON array, or a UrlBatch object "
        '``{"urls": [...], "update": false}``; each item a URL string or an object '
        "``{url, site, page_type, value}``. Good items are registered even when "
        "others are rejected; the answer names each rejected one by its index.",
        "content": {
            "application/json": {
                "schema": {
                    "anyOf": [
                        {"type": "array", "items": _URL_ITEM, "maxItems": MAX_URLS},
                        {
                            "type": "object",
                            "title": "UrlBatch",
                            "required": ["urls"],
                            "properties": {
                                "urls": {"type": "array", "items": _URL_ITEM, "maxItems": MAX_URLS},
                                "update": {"type": "boolean", "default": False},
                            },
                        },
                    ]
                }
            }
        },
    }
}


class CanaryRequest(BaseModel):
    """A canary to declare (or replace): ``url`` must carry ``expect`` (field,
    a dotted path for nested ones → value; numbers compare numerically),
    fetched every ``every_minutes`` outside the budget, also when its site
    is paused. As ``recrawl canary add``."""

    url: str
    expect: dict[str, str | int | float | bool] = Field(..., min_length=1, max_length=100)
    site: str | None = Field(None, min_length=1, max_length=500)
    every_minutes: float = Field(60.0, ge=1, le=30 * 24 * 60, allow_inf_nan=False)

    @field_validator("url")
    @classmethod
    def _url(cls, url: str) -> str:
        return normalize_url(url)

    @field_validator("expect")
    @classmethod
    def _expect(cls, expect: dict[str, Any]) -> dict[str, Any]:
        for field in expect:
            if not field.strip():
                raise ValueError("a field name is empty")
        return expect

    def expectations(self) -> dict[str, str]:
        """``expect`` as the store keeps it: each value a string (``true``, ``19.99``)."""
        return {
            k.strip(): (str(v).lower() if isinstance(v, bool) else str(v))
            for k, v in self.expect.items()
        }


class CanaryRemoveRequest(BaseModel):
    """The canary to withdraw."""

    url: str

    @field_validator("url")
    @classmethod
    def _url(cls, url: str) -> str:
        return normalize_url(url)


class CanaryDoc(Doc):
    """One declared canary: ``every_s`` seconds between its fetches, ``added_at``
    and ``last_fetch`` unix seconds (None before its first fetch)."""

    url: str
    site: str
    expect: dict[str, str]
    every_s: float
    added_at: float
    last_fetch: float | None


class CanariesDoc(Doc):
    """Every declared canary, by site and URL (as ``recrawl canary list --json``)."""

    canaries: list[CanaryDoc]


class CanaryRemoved(Doc):
    """Whether a canary was withdrawn (false: none was declared on ``url``)."""

    url: str
    removed: bool


class PauseRequest(BaseModel):
    """Why a human pauses a site (kept in its history)."""

    reason: str = Field("", max_length=500)
    by: str = Field("api", min_length=1, max_length=200)


class ValidatorsRequest(BaseModel):
    """Whether a site's leases carry validators (ETag / Last-Modified), and why."""

    on: bool
    reason: str = Field("", max_length=500)
    by: str = Field("api", min_length=1, max_length=200)


class UrlRejected(Doc):
    """One rejected URL item: ``index`` counts from 0 in the posted list;
    ``url`` is the URL as given (None when the item has none)."""

    index: int
    url: str | None
    field: str | None
    error: str


class UrlsAdded(Doc):
    """How many of the posted URLs were new, (with ``update``) how many known
    ones changed value, and each item rejected (the others are registered)."""

    received: int
    added: int
    updated: int = 0
    rejected: list[UrlRejected] = []


class UrlList(BaseModel):
    """URLs to forget."""

    urls: list[Annotated[str, AfterValidator(_registrable)]] = Field(..., max_length=MAX_URLS)


class UrlsRemoved(Doc):
    """How many of the posted URLs were pages (and are gone now)."""

    received: int
    removed: int


class LeaseRequest(BaseModel):
    """A worker asks for up to ``max`` tasks."""

    worker: str = Field(..., min_length=1, max_length=200)
    max: int = Field(50, ge=1, le=MAX_LEASE)


class Task(Doc):
    """One leased fetch. ``expires_at`` is unix seconds; report before then or the
    URL returns to the plan. ``headers`` are the validators for a conditional request."""

    lease_id: str
    url: str
    site: str
    page_type: str
    reason: str
    signal: str | None = None
    """The hint source that proved the page changed, when a signal caused the
    fetch: report it as the observation's ``signal``."""
    headers: dict[str, str]
    expires_at: float


class Leases(Doc):
    """Tasks leased to one worker, best first."""

    tasks: list[Task]


class Rejected(Doc):
    """One rejected observation: ``index`` counts from 0 in the posted batch."""

    index: int
    field: str | None
    error: str


class IngestAnswer(Doc):
    """``accepted`` observations are durable (new ones stored, known ones skipped)."""

    accepted: int
    stored: int
    duplicates: int
    rejected: list[Rejected]


OBSERVATIONS_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "Fetch observations (SPEC §5): NDJSON, one object per line, or a "
        "JSON array. Each may carry the ``lease_id`` it reports.",
        "content": {
            "application/x-ndjson": {"schema": {"type": "string"}},
            "application/json": {"schema": {"type": "array", "items": {"type": "object"}}},
        },
    }
}


# -- errors ----------------------------------------------------------------------------------


class ErrorBody(Doc):
    """A refusal, in one sentence (401, 404, 400, 413, 415)."""

    detail: str


class FieldError(Doc):
    """One field that did not validate (``field`` None: the body as a whole)."""

    field: str | None
    error: str


class ValidationErrorBody(Doc):
    """A request that did not validate (422): each field, and why."""

    detail: list[FieldError] | str


def _error(description: str, model: type[BaseModel] = ErrorBody) -> dict[str, Any]:
    return {"model": model, "description": description}


ERROR_RESPONSES: dict[str, dict[int | str, dict[str, Any]]] = {
    "read": {401: _error("Missing or wrong read token (when one is configured).")},
    "write": {
        401: _error("Missing or wrong write token (checked before the body is read)."),
        413: _error("Body larger than ``max_body_bytes``, as sent or decompressed."),
        415: _error("A ``Content-Encoding`` other than gzip, deflate or identity."),
        422: _error("The body or a parameter did not validate.", ValidationErrorBody),
    },
    "body": {400: _error("The body is not of a format read (not JSON, not a sitemap, bad gzip).")},
    "site": {404: _error("No such site.")},
    "page": {404: _error("No such page, or not an absolute http(s) URL.")},
    "query": {422: _error("A query parameter did not validate.", ValidationErrorBody)},
}
"""The error answers each kind of route documents, by kind; every one has the
body :class:`ErrorBody` but 422's (:class:`ValidationErrorBody`)."""


# -- hints -----------------------------------------------------------------------------------


class HintError(Doc):
    """One rejected hint: ``line`` counts from 1 (None: not of one line)."""

    line: int | None
    field: str | None
    error: str


class HintsAnswer(Doc):
    """What a posted sitemap or hint lines gave: hints ``stored`` (new or moved),
    ``unchanged``, for ``unknown`` URLs (skipped unless ``add_urls``), URLs
    registered, and ``rejected`` (the first 100 described in ``errors``)."""

    received: int
    stored: int
    unchanged: int
    unknown: int
    added_urls: int
    rejected: int
    errors: list[HintError]


class HintSource(Doc):
    """One hint source: pages it covers, ``lastmod`` values logged, and when it
    was first and last read (unix seconds)."""

    source: str
    pages: int
    lastmods: int
    first_seen: float
    last_seen: float


class SourceTrustDoc(Doc):
    """How far one source's ``lastmod`` agreed with one site's revisits."""

    site: str
    source: str
    revisits: int
    changed: int
    moved: int
    both: int
    recall: float | None
    precision: float | None
    quiet: bool
    changes: bool
    verdict: str
    lag_s: float | None


class HintReportDoc(Doc):
    """``recrawl hints --json``: the sources, and which the plan trusts per site."""

    days: float
    until: float | None
    sources: list[HintSource]
    trust: list[SourceTrustDoc]
    trusted_means: str
    lag_means: str


class SignalRead(BaseModel):
    """One read of a signal that is no observation (a sitemap or feed fetch)."""

    site: str = Field(..., min_length=1, max_length=500)
    signal: str = Field(..., min_length=1, max_length=64)
    bytes: float = Field(0.0, ge=0, allow_inf_nan=False)
    """Wire bytes, headers included."""
    credits: float = Field(1.0, ge=0, allow_inf_nan=False)


class Delisted(BaseModel):
    """An item page that left every listing of its site (``at``: unix seconds,
    when noticed), or came back (``at`` null)."""

    url: str = Field(..., min_length=1, max_length=8000)
    site: str = Field(..., min_length=1, max_length=500)
    at: float | None = Field(None, allow_inf_nan=False)


class SignalsReport(BaseModel):
    """What a crawl's signals did that is no observation."""

    reads: list[SignalRead] = Field([], max_length=MAX_URLS)
    delisted: list[Delisted] = Field([], max_length=MAX_URLS)


class SignalsCounted(Doc):
    """How many reads were counted and delisting notes taken."""

    reads: int
    delisted: int


class SignalCostDoc(Doc):
    """One signal on one site (:class:`~recrawl.records.signals.SignalCost`):
    costs in ``unit``; ``per_change`` null before a change."""

    site: str
    signal: str
    unit: str
    reads: int
    read_cost: float
    fetches: int
    fetch_cost: float
    changes: int
    cost: float
    per_change: float | None


class SignalsDoc(Doc):
    """``recrawl signals --json``: each signal's cost per change found, per site,
    and the items per site that left every listing."""

    unit: str
    signals: list[SignalCostDoc]
    delisted: dict[str, int]


# -- sites and pages -------------------------------------------------------------------------


class SiteControls(Doc):
    """A site's controls: paused, effective cost factor, lease cap, the band they
    follow, whether its leases carry validators."""

    paused: bool
    cost_multiplier: float | None
    concurrency_cap: int | None
    band: str | None
    validators: bool


class ParserHealthDoc(Doc):
    """Extraction validity: a separate score, owned by whoever keeps the parser."""

    score: float | None
    band: str
    reasons: list[str]


class ActionDoc(Doc):
    """The band's automatic action (never an escalation)."""

    name: str
    concurrency_factor: float | None
    cost_multiplier: float | None
    canaries_only: bool
    alert: bool
    avoid_routes: list[str]


class ThrottleDoc(Doc):
    """How much a site asks to slow down, whatever its band: the share of
    requests asking so, and the concurrency factor and cost multiplier that
    follow."""

    share: float
    concurrency_factor: float
    cost_multiplier: float


class CostDoc(Doc):
    """What a record extracted from the site's answers costs, over the health
    window and in the site's normal (cost drift): bytes and credits, None
    when no record was extracted."""

    bytes_per_record: float | None
    bytes_per_record_normal: float | None
    credits_per_record: float | None
    credits_per_record_normal: float | None


class SiteRow(Doc):
    """One site's health (score 0–100, None: not enough requests or no fetch in
    the window), its controls and its outstanding leases."""

    site: str
    score: float | None
    raw_score: float | None = None
    band: str
    reasons: list[str] = []
    diagnosis: str | None = None
    failing_routes: list[str] = []
    parser: ParserHealthDoc | None = None
    action: ActionDoc | None = None
    throttle: ThrottleDoc | None = None
    cost: CostDoc | None = None
    controls: SiteControls | None
    leases_outstanding: int


class SitesDoc(Doc):
    """``recrawl health --json``: every site worst first, when they were scored
    (unix seconds), the paused ones."""

    at: float | None
    sites: list[SiteRow]
    paused: list[str]


class HealthPoint(Doc):
    """One recorded evaluation of a site (``at`` unix seconds)."""

    at: float
    score: float | None
    raw_score: float | None
    band: str | None
    reasons: list[str] | None


class SiteEvent(Doc):
    """A pause, resume, band change or validators change (``at`` unix seconds)."""

    site: str
    at: float
    kind: str
    detail: str | None


class SiteDetailDoc(SiteRow):
    """``recrawl site show SITE --json``: the site's row, its health history and events."""

    history: list[HealthPoint]
    events: list[SiteEvent]


class PauseAnswer(Doc):
    """A pause: ``recorded`` is false when the site was paused already."""

    site: str
    paused: bool
    recorded: bool
    controls: SiteControls | None


class ResumeAnswer(Doc):
    """A resume, and the site's controls after it."""

    site: str
    resumed: bool
    controls: SiteControls | None


class ValidatorsAnswer(Doc):
    """Whether the site's leases carry validators now; ``recorded`` is false when
    they already did (or did not)."""

    site: str
    validators: bool
    recorded: bool


class PageInfo(Doc):
    """A page: times in unix seconds, its change rate per day with its standard
    deviation, the visits a day the model gives it, when it is next due."""

    url: str
    site: str
    page_type: str
    value: float
    first_seen: float | None
    last_fetch: float | None
    last_ok: float | None
    last_change: float | None
    fetches: int
    changes: int
    etag: str | None
    last_modified: str | None
    gone: bool
    rate_per_day: float | None
    rate_sd_per_day: float | None
    visits_per_day: float | None
    next_due: float | None
    leased: bool


class PageRow(Doc):
    """One page of ``recrawl pages --json``: its state, change rate per day with
    a 90 % interval, decayed evidence, cost per fetch (billing unit), visits and
    cost a day, next due time (unix seconds, None: none)."""

    url: str
    site: str
    page_type: str
    value: float
    state: Literal["ok", "new", "backing_off", "paused", "canary", "gone", "moved"]
    rate_per_day: float | None
    rate_low_per_day: float | None
    rate_high_per_day: float | None
    rate_sd_per_day: float | None
    evidence_changed: float | None
    evidence_unchanged: float | None
    evidence_days: float | None
    cost: float
    visits_per_day: float
    cost_per_day: float
    next_due: float | None
    first_seen: float | None
    last_fetch: float | None
    last_ok: float | None
    fails: int


class PagesDoc(Doc):
    """``recrawl pages --json``: what recrawl believes of each page; ``total``
    matching pages, the first ``limit`` in ``pages``, counts by state."""

    at: float
    site: str | None
    sort: Literal["rate", "due", "value", "cost"]
    billing_unit: str
    total: int
    states: dict[str, int]
    pages: list[PageRow]


# -- plan, budget, stats, calibration --------------------------------------------------------


class RateResolutionDoc(Doc):
    """How many revisited pages changed at every revisit (their rate is only bounded below)."""

    revisited: int
    changed_every_revisit: int
    share: float | None
    median_interval_days: float | None


class PlanTask(Doc):
    """One planned fetch: why, its priority (None: a canary, always first),
    expected freshness gain, cost in the billing unit, the headers its lease
    carries and its change rate per day (None for canaries)."""

    url: str
    site: str
    page_type: str
    reason: str
    priority: float | None
    expected_gain: float
    cost: float
    headers: dict[str, str]
    rate_per_day: float | None
    rate_sd_per_day: float | None
    signal: str | None = None
    """The hint source that proved the page changed (None: the schedule's)."""


class PlanDoc(Doc):
    """``recrawl plan --json``: the cycle's budget and spend (billing unit),
    tasks by reason, ``tasks_total`` and the first tasks, best first."""

    at: float
    budget: float
    spent: float
    unit: str
    split: dict[str, int]
    rate_resolution: RateResolutionDoc | None
    tasks_total: int
    tasks: list[PlanTask]


class BudgetTarget(Doc):
    """What one mean freshness costs a day: the planner's split (``optimal``), one
    interval for every page (``uniform``), the ``budget_per_day`` to configure."""

    freshness: float
    optimal: float | None
    uniform: float | None
    configure: float | None


class BudgetDoc(Doc):
    """``recrawl budget --json``: what freshness costs at the learned rates."""

    at: float
    unit: str
    pages: int
    never_fetched: int
    budget_per_day: float | None
    reserve_share: float
    freshness_at_budget: dict[str, float | None] | None
    targets: list[BudgetTarget]
    rate_resolution: RateResolutionDoc | None


class StatsRow(Doc):
    """One site and page type: fetches, revisits, changes detected, fetches that
    found none, cost (billing unit) and cost per change (None: no change)."""

    site: str
    page_type: str
    fetches: int
    revisits: int
    changes_detected: int
    fetches_without_change: int
    cost: float
    cost_per_change: float | None


class StatsTotal(Doc):
    """The sums of every row (``observations``: every fetch logged)."""

    observations: int
    fetches: int
    revisits: int
    changes_detected: int
    fetches_without_change: int
    cost: float
    cost_per_change: float | None


class StatsDoc(Doc):
    """``recrawl stats --json``: where the money goes."""

    unit: str
    groups: list[StatsRow]
    total: StatsTotal


class GroupCalibrationDoc(Doc):
    """Expected against observed changes at one group's revisits; ``z`` the
    surprise, ``flagged`` beyond chance."""

    name: str
    revisits: int
    expected_changes: float
    observed_changes: int
    ratio: float | None
    z: float | None
    flagged: bool


class CalibrationBinDoc(Doc):
    """Revisits whose predicted change probability fell in ``[lo, hi)``."""

    lo: float
    hi: float
    revisits: int
    mean_predicted: float | None
    observed_share: float | None


class ValidatorCheckDoc(Doc):
    """Whether one site's 304s (not modified) can be trusted."""

    name: str
    conditional: int
    not_modified: int
    full_unchanged: int
    full_changed: int
    unconditional: int
    unconditional_changed: int
    honoured: float | None
    expected_conditional: float | None
    rate_ratio: float | None
    z: float | None
    tested: bool
    unreported_304: int
    ignored: bool
    hides_changes: bool


class CalibrationDoc(Doc):
    """``recrawl calibration --json``: did the change model predict what the
    revisits found (window ``since``–``until``, unix seconds), and the sites
    whose validators were ``turned_off`` on its strength (never over HTTP)."""

    since: float | None
    until: float | None
    overall: GroupCalibrationDoc
    brier: float | None
    brier_reference: float | None
    skill: float | None
    verdict: str
    bins: list[CalibrationBinDoc]
    groups: list[GroupCalibrationDoc]
    validators: list[ValidatorCheckDoc]
    by_history: list[GroupCalibrationDoc]
    validators_off: list[str]
    by: str
    turned_off: list[str]


class Healthz(Doc):
    """Liveness: the store answered."""

    status: str
    version: str
