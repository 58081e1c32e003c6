"""The change model's calibration: predicted against observed changes at revisits."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from recrawl.cli.main import app
from recrawl.engine.engine import Engine
from recrawl.engine.ingest import ingest_lines
from recrawl.engine.pipeline import prune_log
from recrawl.estimate.calibration import (
    CHANGED,
    FIRST,
    UNCHANGED,
    calibration_report,
    revisit_predictions,
    validator_checks,
)
from recrawl.estimate.rates import estimate_rates, fit_group_priors, update_evidence
from recrawl.store import SQLStore

DAY = 86400.0
T0 = 1_700_000_000.0
runner = CliRunner()


def crawl(
    n_pages: int,
    days: float,
    *,
    seed: int,
    speedup: dict[str, tuple[float, float]] | None = None,
    sites: tuple[str, ...] = ("a.example", "b.example"),
) -> list[dict[str, object]]:
    """Fetch logs of Poisson pages (rates log-uniform, once a year to once a
    day) revisited every 1 to 30 days; ``speedup[site] = (from_day, factor)``
    multiplies that site's rates from that day on."""
    rng = np.random.default_rng(seed)
    out: list[dict[str, object]] = []
    for i in range(n_pages):
        site = sites[i % len(sites)]
        lam = math.exp(rng.uniform(math.log(1 / 365), 0.0))
        t, version = 0.0, 0
        while t < days:
            out.append(
                {"url": f"https://{site}/p{i}", "fetched_at": T0 + t * DAY, "status": 200,
                 "record_hash": f"v{version}"}
            )  # fmt: skip
            step = float(rng.uniform(1.0, 30.0))
            rate = lam
            if speedup and site in speedup and t >= speedup[site][0]:
                rate *= speedup[site][1]
            if rng.random() < -math.expm1(-rate * step):
                version += 1
            t += step
    return out


def as_fetches(rows: list[dict[str, object]]) -> tuple[list[int], list[float], list[int]]:
    """Page index, time and kind (first, changed, unchanged) of each row of :func:`crawl`."""
    pg = [int(str(r["url"]).rsplit("p", 1)[1]) for r in rows]
    at = [float(str(r["fetched_at"])) for r in rows]
    kind, last = [], {}
    for p, r in zip(pg, rows, strict=True):
        v = r["record_hash"]
        kind.append(FIRST if p not in last else (CHANGED if last[p] != v else UNCHANGED))
        last[p] = v
    return pg, at, kind


def ingest(store: SQLStore, rows: list[dict[str, object]]) -> None:
    ingest_lines(store, (json.dumps(r) + "\n" for r in rows))


def test_predictions_use_only_the_evidence_before_each_revisit() -> None:
    """Each revisit's rate is the estimate on the fold's evidence as it stood
    before that revisit, decayed to it: changing what a revisit found never
    changes its own prediction, only later ones."""
    at = np.array([0.0, 10.0, 25.0, 27.0, 60.0]) * DAY
    kinds = [FIRST, CHANGED, UNCHANGED, CHANGED, UNCHANGED]
    r = revisit_predictions([0] * 5, at, kinds, [0, 0], half_life_days=30.0)
    flipped = list(kinds)
    flipped[3] = UNCHANGED
    r2 = revisit_predictions([0] * 5, at, flipped, [0, 0], half_life_days=30.0)
    assert len(r) == 4 and r.changed.tolist() == [True, False, True, False]
    assert np.allclose(r.interval_days, [10, 15, 2, 33])
    # the fourth fetch's own prediction does not depend on what it found
    # (priors are refitted on the end state, so compare with fixed priors)
    pri = fit_group_priors([1.0], [10.0], [1.0], [15.0], [0])
    a = revisit_predictions([0] * 5, at, kinds, [0], priors=pri, half_life_days=30.0)
    b = revisit_predictions([0] * 5, at, flipped, [0], priors=pri, half_life_days=30.0)
    assert a.predicted[:3] == pytest.approx(b.predicted[:3])
    assert a.predicted[3] != pytest.approx(b.predicted[3])
    # and it is exactly the estimator on update_evidence's evidence
    ev = (0.0, 0.0, 0.0, 0.0)
    ev = update_evidence(*ev, 10.0, True, half_life_days=30.0)
    ev = update_evidence(*ev, 15.0, False, half_life_days=30.0)
    rate, _ = estimate_rates(
        *([x] for x in ev), priors=pri, elapsed_days=[2.0], half_life_days=30.0
    )
    assert a.rate_per_day[2] == pytest.approx(rate[0])
    assert r2.changed.tolist() == [True, False, False, False]


def test_predictions_age_the_evidence_by_the_planners_hazard() -> None:
    """With the planner's change-point hazard, a revisit after a long silence
    is predicted as the planner sees the page then: its own quiet record
    counts for less and its group's faster changes for more; a prompt
    revisit is predicted almost as without the hazard."""
    # page 0: quiet for months, then revisited after 400 days; page 1 of its
    # group changes at every weekly revisit
    at0 = np.array([0.0, 30.0, 60.0, 90.0, 490.0]) * DAY
    at1 = np.arange(0.0, 100.0, 7.0) * DAY
    page = [0] * len(at0) + [1] * len(at1)
    at = np.concatenate([at0, at1])
    kinds = [FIRST] + [UNCHANGED] * 4 + [FIRST] + [CHANGED] * (len(at1) - 1)
    pri = fit_group_priors([1.0, 14.0], [90.0, 98.0], [0.0, 0.0], [0.0, 0.0], [0, 0])
    kw = {"priors": pri, "half_life_days": math.inf}
    plain = revisit_predictions(page, at, kinds, [0, 0], **kw)
    aged = revisit_predictions(page, at, kinds, [0, 0], hazard_per_day=1 / 365, **kw)
    late = (plain.page == 0) & (plain.interval_days == 400.0)
    prompt = (plain.page == 0) & (plain.interval_days == 30.0)
    assert late.sum() == 1 and prompt.sum() == 3
    assert aged.rate_per_day[late][0] > 1.5 * plain.rate_per_day[late][0]
    np.testing.assert_allclose(aged.rate_per_day[prompt], plain.rate_per_day[prompt], rtol=0.1)
    with pytest.raises(ValueError, match="hazard"):
        revisit_predictions(page, at, kinds, [0, 0], hazard_per_day=-1.0, **kw)


def test_a_calibrated_model_is_not_flagged_and_a_speedup_is() -> None:
    """Poisson pages whose rates hold: observed changes within chance of the
    expected ones, and every probability bin near its prediction. Rates that
    quadruple for the last 60 days: flagged as under-predicted."""
    rows = crawl(1500, 365.0, seed=3)
    pg, at, kind = as_fetches(rows)
    since = T0 + 300 * DAY
    r = revisit_predictions(pg, at, kind, np.zeros(1500, dtype=int), since=since)
    c = calibration_report(r.predicted, r.changed)
    assert c.overall.revisits > 2000
    assert abs(c.overall.z) < 3 and not c.overall.flagged
    assert "calibrated" in c.verdict()
    assert c.skill > 0.3  # far better than predicting the base rate everywhere
    for b in c.bins:
        if b.revisits >= 200:
            assert abs(b.observed_share - b.mean_predicted) < 0.08

    fast = crawl(
        1500, 365.0, seed=3, speedup={"a.example": (300.0, 4.0), "b.example": (300.0, 4.0)}
    )
    pg, at, kind = as_fetches(fast)
    r = revisit_predictions(pg, at, kind, np.zeros(1500, dtype=int), since=since)
    c = calibration_report(r.predicted, r.changed)
    assert c.overall.flagged and c.overall.z > 5 and c.overall.ratio > 1.2
    assert "more often than estimated" in c.verdict()


def test_an_empty_store_has_nothing_to_judge(tmp_path: Path) -> None:
    from recrawl.store import SQLiteStore

    store = SQLiteStore(tmp_path / "e.db")
    try:
        cal = Engine(store, clock=lambda: T0).calibration()
    finally:
        store.close()
    assert cal.overall.revisits == 0 and cal.until == T0  # the window ends now, not in 1970
    assert cal.verdict() == "no revisits to check the change model against yet"


def test_report_edge_cases() -> None:
    empty = calibration_report([], [])
    assert empty.overall.revisits == 0 and math.isnan(empty.brier)
    assert empty.verdict() == "no revisits to check the change model against yet"
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        calibration_report([1.5], [True])
    with pytest.raises(ValueError, match="one value per revisit"):
        calibration_report([0.5, 0.5], [True])
    with pytest.raises(ValueError, match="kind"):
        revisit_predictions([0], [0.0], [7], [0])
    with pytest.raises(ValueError, match="outside the group array"):
        revisit_predictions([3], [0.0], [FIRST], [0])
    # fewer than 20 revisits are never flagged, however far off
    small = calibration_report([0.01] * 10, [True] * 10)
    assert not small.overall.flagged and small.overall.z > 3


def test_engine_names_the_site_whose_pages_sped_up(store: SQLStore) -> None:
    """On both backends: one site's pages change four times as often for the
    last 60 days of a year; the other's hold. The whole may look only a bit
    off; the per-site figures flag the first site alone."""
    ingest(store, crawl(600, 365.0, seed=5, speedup={"a.example": (300.0, 4.0)}))
    cal = Engine(store).calibration(days=60)
    by = {g.name: g for g in cal.groups}
    assert set(by) == {"a.example", "b.example"}
    assert by["a.example"].flagged and by["a.example"].z > 3
    assert not by["b.example"].flagged
    assert cal.groups[0].name == "a.example"  # most surprising first
    assert "a.example" in cal.verdict()
    # the window ends at the log's newest fetch, not the wall clock
    assert cal.overall.revisits > 500
    # by page type too
    cal2 = Engine(store).calibration(days=60, by="group")
    assert {g.name for g in cal2.groups} == {"a.example / page", "b.example / page"}


def test_pruned_log_checks_from_the_checkpoint(store: SQLStore) -> None:
    """After a prune, revisits are predicted from the pages' checkpoints:
    the same predictions as with the whole log."""
    ingest(store, crawl(200, 200.0, seed=7))
    before = Engine(store).calibration(days=50).as_dict()
    prune_log(store, T0 + 120 * DAY)
    after = Engine(store).calibration(days=50).as_dict()
    assert after["overall"]["revisits"] == before["overall"]["revisits"] > 100
    assert after["overall"]["expected_changes"] == pytest.approx(
        before["overall"]["expected_changes"], rel=1e-6
    )
    assert after["brier"] == pytest.approx(before["brier"], rel=1e-6)


def test_cli_calibration(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in crawl(300, 200.0, seed=9)))
    db = str(tmp_path / "s.db")
    assert runner.invoke(app, ["ingest", str(log), "--db", db]).exit_code == 0
    res = runner.invoke(app, ["calibration", "--db", db, "--days", "60"])
    assert res.exit_code == 0, res.output
    assert "revisits" in res.output and "predicted" in res.output
    res = runner.invoke(app, ["calibration", "--db", db, "--days", "60", "--json"])
    data = json.loads(res.output)
    assert data["overall"]["revisits"] > 0 and data["verdict"]
    assert {g["name"] for g in data["groups"]} == {"a.example", "b.example"}
    bad = runner.invoke(app, ["calibration", "--db", db, "--days", "0"])
    assert bad.exit_code != 0 and "days" in bad.output


def validator_crawl(seed: int) -> list[dict[str, object]]:
    """Three sites fetched with validators 70 % of the time (the rest, a
    verification sample, without): honest.example answers 304 when nothing
    changed, liar.example answers 304 to every conditional request (changed or
    not), ignorer.example answers every request in full."""
    rng = np.random.default_rng(seed)
    out: list[dict[str, object]] = []
    for i in range(240):
        site = ("honest.example", "liar.example", "ignorer.example")[i % 3]
        lam = math.exp(rng.uniform(math.log(1 / 60), math.log(1 / 3)))
        t, version, seen = 0.0, 0, 0
        first = True
        while t < 200.0:
            row: dict[str, object] = {"url": f"https://{site}/p{i}", "fetched_at": T0 + t * DAY}
            conditional = not first and rng.random() < 0.7
            first = False
            if conditional and (
                site == "liar.example" or (site == "honest.example" and version == seen)
            ):
                row |= {"status": 304, "conditional": True}
            else:
                row |= {"status": 200, "conditional": conditional, "record_hash": f"v{version}",
                        "etag": f'"v{version}"'}  # fmt: skip
                seen = version
            out.append(row)
            step = float(rng.uniform(1.0, 8.0))
            if rng.random() < -math.expm1(-lam * step):
                version += 1
            t += step
    return out


def test_a_host_whose_304s_hide_changes_is_found_and_sent_no_validators(
    store: SQLStore,
) -> None:
    """On both backends: the liar's conditional revisits find no change where
    its unconditional ones say many were due: flagged, and --apply (here
    apply=True) stops its validators, recorded in its history. The honest
    host honours validators; the ignorer is reported as ignoring them."""
    ingest(store, validator_crawl(11))
    engine = Engine(store)
    liar, honest = "https://liar.example/p1", "https://honest.example/p0"
    assert engine.headers_for(liar) and engine.headers_for(honest)
    cal = engine.calibration(days=100)
    assert engine.apply_calibration(cal) == ["liar.example"]
    by = {v.name: v for v in cal.validators}
    assert cal.hiding_changes == ["liar.example"]
    assert by["liar.example"].full_changed == 0 and by["liar.example"].expected_conditional > 20
    assert by["liar.example"].z < -3
    h = by["honest.example"]
    assert not h.hides_changes and not h.ignored and h.honoured == 1.0
    assert by["ignorer.example"].ignored and by["ignorer.example"].honoured == 0.0
    assert "304s (not modified) from liar.example hide changes" in cal.verdict()
    # validators off for the liar only, recorded; a second apply records nothing
    assert engine.headers_for(liar) == {} and engine.headers_for(honest)
    assert store.sites_without_validators() == {"liar.example"}
    (ev,) = [e for e in store.site_events("liar.example") if e["kind"] == "validators_off"]
    assert "by calibration" in ev["detail"] and "answered 304" in ev["detail"]
    again = engine.calibration(days=100)
    assert again.validators_off == ["liar.example"] and again.hiding_changes == []
    assert engine.apply_calibration(again) == []
    assert len([e for e in store.site_events("liar.example") if e["kind"] == "validators_off"]) == 1
    assert store.site_controls()["liar.example"]["validators"] is False
    with pytest.raises(ValueError, match="per site"):
        engine.apply_calibration(engine.calibration(days=100, by="group"))
    # a human turns them back on
    assert engine.set_validators("liar.example", True, by="ops")
    assert engine.headers_for(liar) and not engine.set_validators("liar.example", True)
    assert store.site_controls()["liar.example"]["validators"] is True
    # verification and canary tasks never carry validators
    tasks = [{"url": honest, "reason": "score"}, {"url": liar, "reason": "verify"}]
    assert set(engine.headers_for_tasks(tasks)) == {honest}


def test_cli_site_validators_and_calibration_apply(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in validator_crawl(12)))
    db = str(tmp_path / "s.db")
    assert runner.invoke(app, ["ingest", str(log), "--db", db]).exit_code == 0
    res = runner.invoke(app, ["calibration", "--db", db, "--days", "100"])
    assert res.exit_code == 0, res.output
    assert "304s hide changes" in res.output and "--apply turns" in res.output
    res = runner.invoke(app, ["calibration", "--db", db, "--days", "100", "--apply"])
    assert "Validators turned off for liar.example" in res.output
    res = runner.invoke(
        app, ["site", "validators", "liar.example", "on", "--db", db, "--by", "ops"]
    )
    assert res.exit_code == 0 and "validators on (recorded, by ops)" in res.output
    typo = subprocess.run(
        [sys.executable, "-m", "recrawl", "site", "validators", "liar.exmaple", "off", "--db", db],
        capture_output=True,
        text=True,
    )
    assert typo.returncode == 2 and "no site 'liar.exmaple'" in typo.stderr
    res = runner.invoke(app, ["site", "validators", "liar.example", "maybe", "--db", db])
    assert res.exit_code == 2


def random_log(rng: np.random.Generator, n_pages: int, n: int) -> list[dict[str, object]]:
    """Fetches of every kind, in shuffled order: 200s that change or not, 304s,
    503s, 404s, 410s, timeouts, two fetches at one instant."""
    rows: list[dict[str, object]] = []
    for _ in range(n):
        i = int(rng.integers(n_pages))
        t = T0 + float(rng.integers(0, 400)) * DAY / 4
        row: dict[str, object] = {"url": f"https://r.example/p{i}", "fetched_at": t}
        k = int(rng.integers(8))
        if k < 4:
            row |= {"status": 200, "record_hash": f"v{int(rng.integers(3))}"}
        elif k == 4:
            row |= {"status": 304, "conditional": True}
        elif k == 5:
            row |= {"status": int(rng.choice([503, 404, 410]))}
        elif k == 6:
            row |= {"error": "timeout"}
        else:
            row |= {"status": 200, "record_hash": "v0", "etag": '"e"'}
        rows.append(row)
    return rows


@pytest.mark.parametrize("half_life", [None, 20.0])
def test_replay_ends_where_the_stores_fold_ends(tmp_path: Path, half_life: float | None) -> None:
    """Random logs ingested in batches (late reports re-fold pages), pruned
    halfway and fed more: replaying content_history gives every page the
    evidence and last success the store holds, at the store's half-life."""
    from recrawl.records.evidence import EVIDENCE_COLUMNS
    from recrawl.records.pages import evidence_blob
    from recrawl.store import SQLiteStore

    rng = np.random.default_rng(17)
    store = SQLiteStore(tmp_path / "s.db", half_life_days=half_life)
    try:
        for k in range(6):
            ingest(store, random_log(rng, 40, 150))
            if k == 3:
                prune_log(store, T0 + 30 * DAY)
        engine = Engine(store)
        pages, cols = engine.page_arrays(T0)
        h = store.content_history(-math.inf)
        index = {u: i for i, u in enumerate(cols["url"])}
        pos = {pid: index[u] for pid, u in h.urls.items()}
        pg = np.array([pos[int(x)] for x in h.page], dtype=np.intp)
        n = len(cols["url"])
        first, ev = np.full(n, np.nan), np.zeros((4, n))
        evidence = np.zeros((n, EVIDENCE_COLUMNS), dtype=np.float32)
        for pid, (lo, *e) in h.checkpoints.items():
            first[pos[pid]], ev[:, pos[pid]] = lo, e
            blob = evidence_blob(h.checkpoint_evidence.get(pid), e[0], e[1])
            evidence[pos[pid]] = np.frombuffer(blob, dtype="<f4")
        r = revisit_predictions(
            pg, h.fetched_at, h.kind, pages.group, start=(first, *ev),
            half_life_days=half_life or 180.0, start_evidence=evidence,
        )  # fmt: skip
        last_ok, *end = r.end
        reached = ~np.isnan(cols["last_ok"])
        assert reached.sum() > 30 and h.checkpoints
        np.testing.assert_array_equal(last_ok[reached], cols["last_ok"][reached])
        for got, name in zip(end, ("ev_nc", "ev_tc", "ev_nu", "ev_tu"), strict=True):
            np.testing.assert_allclose(got, cols[name], rtol=1e-9, atol=1e-12)
    finally:
        store.close()


def test_many_small_groups_are_not_flagged_by_chance() -> None:
    """200 sites of 25 revisits each, outcomes drawn from the predictions
    themselves (a perfect model), few changes expected per site: no site is
    flagged; a site whose pages change four times as often still is."""
    rng = np.random.default_rng(0)
    p = rng.uniform(0.001, 0.02, 200 * 25)
    changed = rng.random(p.size) < p
    groups = np.repeat(np.arange(200), 25)
    c = calibration_report(p, changed, groups)
    assert not any(g.flagged for g in c.groups)
    p2 = rng.uniform(0.1, 0.3, 300)
    fast = rng.random(300) < -np.expm1(4 * np.log1p(-p2))
    c2 = calibration_report(np.r_[p, p2], np.r_[changed, fast], np.r_[groups, np.full(300, 200)])
    assert [g.name for g in c2.groups if g.flagged] == ["200"]
    assert c2.groups[0].name == "200"  # flagged first


def test_verdict_says_when_it_cannot_judge_or_is_only_close() -> None:
    few = calibration_report([0.01] * 10, [True] * 10)
    assert "too few revisits to judge" in few.verdict() and not few.overall.flagged
    rng = np.random.default_rng(1)
    p = rng.uniform(0.2, 0.6, 100_000)
    changed = rng.random(p.size) < 0.88 * p  # 12 % fewer: certain, but within 20 %
    c = calibration_report(p, changed)
    assert not c.overall.flagged and abs(c.overall.z) > 10
    assert "within 20 %" in c.verdict() and "calibrated" not in c.verdict()


def test_by_history_shows_the_overshoot_on_pages_barely_known() -> None:
    """Poisson pages revisited every 2 to 10 days: the table by history has
    a bin per amount of evidence, and the bins add up to the whole."""
    rows = crawl(800, 120.0, seed=21)
    pg, at, kind = as_fetches(rows)
    r = revisit_predictions(pg, at, kind, np.zeros(800, dtype=int))
    c = calibration_report(
        r.predicted, r.changed, history=r.history, since=T0, until=T0 + 120 * DAY
    )
    assert [g.name for g in c.by_history] == ["0–1", "1–3", "3–6", "6+"]
    assert sum(g.revisits for g in c.by_history) == c.overall.revisits
    assert c.as_dict()["since"] == T0 and len(c.as_dict()["by_history"]) == 4


def simulated_host(
    rng: np.random.Generator,
    *,
    lie: float = 0.0,
    model_off: float = 1.0,
    n_cond: int = 600,
    n_unc: int = 150,
    split_by_speed: bool = False,
) -> tuple[np.ndarray, ...]:
    """One site's revisits: pages of log-uniform rates, a model that shrinks
    each estimate toward the site's mean (and is ``model_off`` times too
    slow), revisit intervals of 1 to 20 days, and a host that answers 304 to
    a share ``lie`` of the changed pages asked with validators. With
    ``split_by_speed``, the unconditional revisits go to the fastest pages and
    the conditional ones to the slowest."""
    n = n_cond + n_unc
    lam = np.exp(rng.uniform(np.log(1 / 200), np.log(1.0), n))
    est = np.sqrt(lam * 0.05) / model_off
    t = rng.uniform(1.0, 20.0, n)
    truth = rng.random(n) < -np.expm1(-lam * t)
    order = np.argsort(np.argsort(lam)) if split_by_speed else rng.permutation(n)
    cond = order < n_cond
    hidden = cond & truth & (rng.random(n) < lie)
    seen = truth & ~hidden
    return -np.expm1(-est * t), seen, cond, cond & ~seen, est


def test_validator_check_finds_partial_liars_and_spares_honest_hosts() -> None:
    """The stratified likelihood ratio test: a host hiding half its changes is
    found; honest hosts are not flagged when the model is three times off
    for them, when the two samples reach pages of different speeds, or when
    20 unconditional revisits all found a change."""
    rng = np.random.default_rng(5)

    def check(**kw: object) -> object:
        p, seen, cond, nm, est = simulated_host(rng, **kw)  # type: ignore[arg-type]
        (v,) = validator_checks(p, seen, cond, nm, np.zeros(len(p), int), ["s"], est)
        return v

    found = [check(lie=0.5).hides_changes for _ in range(20)]  # type: ignore[attr-defined]
    assert sum(found) >= 17
    for kw in ({}, {"model_off": 3.0}, {"split_by_speed": True}):
        flagged = [check(**kw).hides_changes for _ in range(30)]  # type: ignore[attr-defined]
        assert sum(flagged) == 0, kw
    # 20 unconditional revisits that all changed: no runaway fit
    p = np.r_[np.full(20, 0.85), np.full(300, 0.25)]
    seen = np.r_[np.ones(20, bool), np.arange(300) < 75]
    cond = np.r_[np.zeros(20, bool), np.ones(300, bool)]
    (v,) = validator_checks(p, seen, cond, cond & ~seen, np.zeros(320, int), ["s"])
    assert not v.hides_changes and np.isfinite(v.z)
    # a 304 counts as a conditional answer even when the report does not say
    # so; but then the full answers to conditional requests look unconditional,
    # so the site is not tested (an honest host would look like a liar)
    for lie in (0.0, 1.0):
        p, seen, cond, nm, est = simulated_host(rng, lie=lie)
        none = np.zeros(len(p), bool)
        (v,) = validator_checks(p, seen, none, nm, np.zeros(len(p), int), ["s"], est)
        assert v.not_modified == v.conditional == v.unreported_304 > 0
        assert not v.tested and not v.hides_changes
    # a 304 predicted as near certain to have changed does not make the fit oscillate
    p = np.r_[np.full(100, 0.5), np.full(95, 0.5), np.ones(5)]
    cond = np.r_[np.zeros(100, bool), np.ones(100, bool)]
    seen = np.r_[np.arange(100) < 50, np.arange(95) < 47, np.zeros(5, bool)]
    (v,) = validator_checks(p, seen, cond, cond & ~seen, np.zeros(200, int), ["s"])
    assert v.z < 0 and v.rate_ratio < 1  # fewer found with validators, not more


def test_many_honest_hosts_are_not_flagged_by_chance() -> None:
    rng = np.random.default_rng(8)
    parts = [simulated_host(rng, n_cond=200, n_unc=40) for _ in range(100)]
    groups = np.concatenate([np.full(len(x[0]), i) for i, x in enumerate(parts)])
    p, seen, cond, nm, est = (np.concatenate([x[k] for x in parts]) for k in range(5))
    checks = validator_checks(p, seen, cond, nm, groups, None, est)
    assert len(checks) == 100 and not any(v.hides_changes for v in checks)
    assert checks[0].threshold > 3  # 100 sites tested at once


def test_plan_json_carries_the_headers_a_lease_would(tmp_path: Path) -> None:
    """A fetcher driven by `recrawl plan --json` gets the same validators as a
    lease: its site's ETag for a scored task, none for verification tasks or
    for a site whose validators are off."""
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in validator_crawl(12)))
    db = str(tmp_path / "s.db")
    assert runner.invoke(app, ["ingest", str(log), "--db", db]).exit_code == 0
    at = str(T0 + 201 * DAY)
    res = runner.invoke(app, ["plan", "--db", db, "--budget", "60", "--at", at, "--json"])
    tasks = json.loads(res.output)["tasks"]
    assert tasks and all("headers" in t for t in tasks)
    assert all(t["headers"] == {} for t in tasks if t["reason"] == "verify")
    scored = [t for t in tasks if t["reason"] != "verify" and t["site"] == "honest.example"]
    assert scored and all(t["headers"].get("If-None-Match") for t in scored)
    runner.invoke(app, ["site", "validators", "honest.example", "off", "--db", db])
    res = runner.invoke(app, ["plan", "--db", db, "--budget", "60", "--at", at, "--json"])
    tasks = json.loads(res.output)["tasks"]
    assert all(t["headers"] == {} for t in tasks if t["site"] == "honest.example")
