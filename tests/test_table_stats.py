"""How a table decides: the paired-seed test of an ordering (fgx/tables/stats.py) and the checks and
notes built on it (fgx/tables/checks.py), as unit tests on made-up seeds and runs. Fast, so that
`scripts/mutation.sh fgx/tables/stats.py` and `fgx/tables/checks.py` can run them for every mutant;
the table jobs that exercise the same code end to end are in test_table_evidence.py and test_tables.py."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from fgx.tables.stats import SeedTerm, paired_outcome


def exact(*values: dict) -> dict:
    """An evaluation-data term of zero for every seed of ``values``: the test is the paired t over seeds."""
    return {s: SeedTerm(bound=0.0) for v in values for s in v}


def bounded(values: dict, sd: float) -> dict:
    return {s: SeedTerm(bound=sd) for s in values}


def test_a_gap_inside_seed_noise_is_inconclusive_and_a_reversed_one_fails():
    a = {0: 0.84, 1: 0.80, 2: 0.86, 3: 0.79, 4: 0.85}
    noisy = {0: 0.83, 1: 0.82, 2: 0.84, 3: 0.81, 4: 0.83}          # mean gap 0.002, differences of both signs
    assert paired_outcome(a, noisy, items=exact(a)).outcome == "inconclusive"
    better = {s: v + 0.03 + 0.001 * s for s, v in a.items()}
    assert paired_outcome(better, a, items=exact(a)).outcome == "holds"
    p = paired_outcome(a, better, items=exact(a))                   # the claim a >= better, reversed
    assert p.outcome == "fails" and p.high < 0 < -p.low
    # lower is better: the claim is about the smaller value
    assert paired_outcome(a, better, lower_is_better=True, items=exact(a)).outcome == "holds"
    # one paired seed, or none: no test
    assert paired_outcome({0: 0.9}, {0: 0.1}, items=exact({0: 0})).outcome == "inconclusive"
    assert paired_outcome({0: 0.9}, {1: 0.1}).outcome == "inconclusive"
    # a consistent gap inside the test items' noise decides nothing; outside it, it does
    assert paired_outcome(better, a, items=bounded(a, 0.05)).outcome == "inconclusive"
    assert paired_outcome(better, a, items=bounded(a, 0.01)).outcome == "holds"
    # and without any evaluation-data term nothing is decided, however consistent the seeds
    p = paired_outcome(better, a)
    assert p.outcome == "inconclusive" and p.p is None and p.reason.startswith("no evaluation-data term")


def test_rows_equal_on_every_seed_are_inconclusive_and_say_why():
    # equality satisfies ">=" literally but is no evidence for a paper's ordering; the reason names it
    a = {0: 1.0, 1: 1.0, 2: 1.0}
    p = paired_outcome(a, dict(a))
    assert p.outcome == "inconclusive" and p.reason == "equal on every seed" and p.low == p.high == 0.0
    # a constant non-zero difference without item noise is a point interval and decides
    assert paired_outcome({s: v + 0.01 for s, v in a.items()}, a, items=exact(a)).outcome == "holds"
    # equal on two seeds of three is not "equal on every seed"
    q = paired_outcome({0: 1.0, 1: 1.0, 2: 0.9}, a)
    assert q.reason != "equal on every seed"


def test_the_interval_is_the_paired_t_interval():
    from scipy import stats

    a = {0: 0.70, 1: 0.74, 2: 0.71, 3: 0.69}
    b = {0: 0.66, 1: 0.73, 2: 0.69, 3: 0.64}
    p = paired_outcome(a, b, items=exact(a))        # no item noise: the paired t-interval over seeds
    r = stats.ttest_rel([a[s] for s in a], [b[s] for s in b])
    low, high = r.confidence_interval(0.95)
    assert p.low == pytest.approx(low) and p.high == pytest.approx(high) and p.n == 4
    assert p.p == pytest.approx(r.pvalue) and p.df == 3


def test_an_ordering_check_pairs_seeds_and_bounds_the_items_term_by_the_runs_standard_errors():
    from fgx.report.runs import Run
    from fgx.report.table import build_report
    from fgx.tables.checks import ordering_checks

    def run(method, seed, acc, se):
        return Run(Path(f"{method}{seed}"), "completed", {"method": method, "seed": str(seed)},
                   {"final": {"accuracy": acc}, "seed": seed, "main_metric": "accuracy",
                    "sampling_se": {"accuracy": se}})

    # the gap is the same on every seed (paired) though the seeds differ a lot (unpaired noise)
    runs = [run("x", s, 0.5 + 0.1 * s + 0.02, 0.005) for s in range(4)] + \
        [run("y", s, 0.5 + 0.1 * s, 0.005) for s in range(4)]
    rep = build_report(runs, by=["method"], metrics=["accuracy"])
    [c] = ordering_checks(rep, {"key": "method", "order": ["x", "y"]}, "accuracy")
    assert c.outcome == "holds" and "Δ = +0.0200" in c.fgx
    # the same gap on a split whose sampling error is larger than it: not decided
    runs = [Run(r.path, r.status, r.overrides, {**r.summary, "sampling_se": {"accuracy": 0.05}}) for r in runs]
    [c] = ordering_checks(build_report(runs, by=["method"], metrics=["accuracy"]),
                          {"key": "method", "order": ["x", "y"]}, "accuracy")
    assert c.outcome == "inconclusive" and "items 0.1000" in c.fgx          # bound: (se_a + se_b) per seed


def _entry(row: str, seed: int, acc: float, gain: float | None = None) -> dict:
    s = {"final": {"accuracy": acc}, "best": {"round": 3, "val": acc, "test": {"accuracy": acc}}}
    return {"overrides": {"method": row, "seed": str(seed)}, "summary": s,
            "progress": {"gain_last_10pct": gain} if gain is not None else {}}


def equal_rows_notes(record, sweep):
    """The failing rows checks' texts (the table reads "refused" with any of them)."""
    from fgx.tables.checks import equal_rows_checks

    checks = equal_rows_checks(record, sweep)
    assert all((c.kind, c.ok, c.outcome, c.paper) == ("rows", False, "fails", "rows that can differ") for c in checks)
    return [f"{c.what}: {c.fgx}" for c in checks]


def test_a_row_equal_to_another_on_every_seed_refuses_the_table_and_one_that_differs_once_does_not():
    sweep = {"method": "fedavg,gcfl,fedprox", "seed": "0,1,2"}
    runs = [_entry(m, s, 0.5 + 0.01 * s) for m in ("fedavg", "gcfl") for s in range(3)]
    runs += [_entry("fedprox", s, 0.5 + 0.01 * s + (0.001 if s == 2 else 0.0)) for s in range(3)]
    notes = equal_rows_notes({"runs": runs}, sweep)
    assert len(notes) == 1 and "method=fedavg, method=gcfl" in notes[0] and "3 shared seeds" in notes[0]
    # one seed alone says nothing (two rows can tie once)
    assert equal_rows_notes({"runs": [_entry("fedavg", 0, 0.5), _entry("gcfl", 0, 0.5)]}, sweep) == []


def test_rows_still_improving_at_the_end_are_named_under_trained():
    from fgx.tables.checks import progress_notes

    sweep = {"method": "a,b", "seed": "0,1"}
    runs = [_entry("a", s, 0.5, gain=0.02) for s in range(2)] + [_entry("b", s, 0.5, gain=0.0) for s in range(2)]
    notes = progress_notes({"runs": runs}, sweep)
    assert "a +0.0200" in notes[0] and "b +0.0000" in notes[0]
    assert len(notes) == 2 and "Still improving at the end (gain > 0.005): a;" in notes[1]
    assert len(progress_notes({"runs": runs[2:]}, sweep)) == 1
    # a diverged run's curve is no under-training: row a, diverged on both seeds, is not named
    for e in runs[:2]:
        e["summary"]["status"] = "diverged"
    assert progress_notes({"runs": runs}, sweep) == [progress_notes({"runs": runs[2:]}, sweep)[0]]


def test_the_seeds_rule_reads_what_a_run_costs_from_runs_that_completed():
    from fgx.tables.seeds import seeds_note

    done = [{"summary": {"status": "completed", "wall_time_s": 30.0}} for _ in range(3)]
    stopped = [{"summary": {"status": "diverged", "wall_time_s": 1.0}} for _ in range(5)]
    text, info = seeds_note({"runs": done + stopped}, {"seed": "0,1,2,3,4"})
    assert "took 30.0 s" in text and info == {"seeds": 5, "rule": 5, "below": False}
    assert "took 1.0 s" in seeds_note({"runs": stopped}, {"seed": "0,1,2,3,4"})[0]     # none completed


def _record(p) -> tuple:
    return p.outcome, p.n, p.mean, p.low, p.high, p.reason


def test_every_outcome_carries_its_seeds_gap_interval_and_reason():
    """What a table prints is the Paired record (Δ, interval, n, reason): each branch's whole record."""
    import math

    from scipy import stats

    none = paired_outcome({0: 0.9}, {1: 0.1})
    assert (none.outcome, none.n, none.reason) == ("inconclusive", 0, "no seed run by both")
    assert all(math.isnan(x) for x in (none.mean, none.low, none.high))
    one = paired_outcome({0: 0.9, 1: 0.5}, {0: 0.1}, items=exact({0: 0}))
    assert _record(one) == ("inconclusive", 1, pytest.approx(0.8), -math.inf, math.inf, "one paired seed: no test")

    def t_interval(d):
        m, sd = sum(d) / len(d), stats.tstd(d)
        half = stats.t.ppf(0.975, len(d) - 1) * sd / math.sqrt(len(d))
        return pytest.approx(m), pytest.approx(m - half), pytest.approx(m + half)

    a = {0: 0.70, 1: 0.74, 2: 0.71, 3: 0.69}
    b = {0: 0.66, 1: 0.73, 2: 0.69, 3: 0.64}
    d = [a[s] - b[s] for s in a]
    assert _record(paired_outcome(a, b, items=exact(a))) == ("holds", 4, *t_interval(d), "")
    assert _record(paired_outcome(b, a, items=exact(a))) == ("fails", 4, *t_interval([-x for x in d]), "")
    mixed = {0: 0.72, 1: 0.70, 2: 0.73, 3: 0.66}
    dm = [a[s] - mixed[s] for s in a]
    assert _record(paired_outcome(a, mixed, items=exact(a))) == ("inconclusive", 4, *t_interval(dm),
                                                                  "the interval contains 0")
    nodata = paired_outcome(a, b)
    assert _record(nodata)[:2] == ("inconclusive", 4) and nodata.reason.startswith("no evaluation-data term")
    assert _record(paired_outcome(a, dict(a))) == ("inconclusive", 4, 0.0, 0.0, 0.0, "equal on every seed")


def test_the_lower_is_better_gap_is_oriented_toward_the_claim():
    a = {0: 0.20, 1: 0.25, 2: 0.22}
    worse = {0: 0.30, 1: 0.36, 2: 0.31}                   # higher, so worse when lower is better
    p = paired_outcome(a, worse, lower_is_better=True, items=exact(a))
    assert p.outcome == "holds" and p.mean == pytest.approx(0.1)
    q = paired_outcome(worse, a, lower_is_better=True, items=exact(a))
    assert q.outcome == "fails" and q.mean == pytest.approx(-0.1)


def test_two_paired_seeds_are_enough_to_decide():
    # n - 1 = 1 degree of freedom: a wide t quantile (12.7), but a tight enough gap still decides
    p = paired_outcome({0: 0.6, 1: 0.7001}, {0: 0.5, 1: 0.6}, items=exact({0: 0, 1: 0}))
    assert p.outcome == "holds" and p.n == 2 and p.low > 0


def test_a_constant_gap_is_decided_by_the_items_term_alone_on_the_normal_quantile():
    # every seed's gap is 0.25 exactly: the seeds add nothing, the items' sd s gives z = 0.25 / s; with
    # nothing but the bound's (infinite) degrees of freedom the two-sided 5 % cut is z = 1.95996...
    a, b = {0: 0.75, 1: 0.5}, {0: 0.5, 1: 0.25}
    assert paired_outcome(a, b, items=bounded(a, 0.25 / 1.9600)).outcome == "holds"
    assert paired_outcome(a, b, items=bounded(a, 0.25 / 1.9599)).outcome == "inconclusive"


def test_differences_with_unit_spread_are_an_interval_not_a_point():
    # gaps 1, 2, 3: standard deviation exactly 1; the interval is 2 ± 4.30/sqrt(3), so it contains 0
    p = paired_outcome({0: 1.0, 1: 2.0, 2: 3.0}, {0: 0.0, 1: 0.0, 2: 0.0}, items=exact({0: 0, 1: 0, 2: 0}))
    assert p.outcome == "inconclusive" and p.low < 0 < p.high


def test_describe_says_the_gap_the_interval_the_seeds_and_why():
    assert paired_outcome({0: 0.9}, {1: 0.1}).describe() == "no paired seeds"
    assert paired_outcome({0: 0.9}, {0: 0.1}).describe() == \
        "Δ = +0.8000, 95% CI no interval, n = 1; one paired seed: no test"
    a, b = {0: 0.75, 1: 0.5}, {0: 0.5, 1: 0.25}
    assert paired_outcome(a, b, items=exact(a)).describe() == \
        "Δ = +0.2500, 95% CI [+0.2500, +0.2500], n = 2, SE seeds 0.0000 + items 0.0000, p = 0"
    assert paired_outcome(b, a, items=bounded(a, 0.1)).describe() == \
        "Δ = -0.2500, 95% CI [-0.4460, -0.0540], n = 2, SE seeds 0.0000 + items 0.1000, p = 0.0124"
    assert paired_outcome(a, dict(a)).describe() == \
        "Δ = +0.0000, 95% CI [+0.0000, +0.0000], n = 2; equal on every seed"
    assert paired_outcome(a, b).describe() == "Δ = +0.2500, 95% CI [+0.2500, +0.2500], n = 2; " \
        "no evaluation-data term (the runs kept no test-item replicates or standard errors)"


# -- fgx/tables/checks.py: a table's checks and its status, from made-up runs -----------------------
def _run(method, seed, acc, se=0.0, majority=None, status="completed", metric="accuracy"):
    from fgx.report.runs import Run

    summary = {"final": {metric: acc}, "seed": seed, "main_metric": metric}
    if se is not None:
        summary["sampling_se"] = {metric: se}
    if majority is not None:
        summary["data"] = {"test_majority_rate": majority}
    return Run(Path(f"{method}{seed}"), status, {"method": method, "seed": str(seed)}, summary)


def _report(runs, metric="accuracy"):
    from fgx.report.table import build_report

    return build_report(runs, by=["method"], metrics=[metric])


def _outcomes(checks):
    return [(c.what, c.outcome) for c in checks]


def test_the_status_is_computed_from_the_checks_and_the_record():
    """reproduced needs a paper value or an ordering that holds; floors and effort alone run as expected; a
    row the record lacks is not run; two rows equal in every number refuse the table."""
    from fgx.tables.checks import Check, ReproResult

    def result(*oks, record=True, stale=()):
        res = ReproResult("t", {}, "", [Check("c", "", "", ok) for ok in oks], record={} if record else None)
        res.stale = list(stale)
        return res

    assert result(True, record=False).status == "not yet run"
    assert result(True, stale=["code: fgx/x.py changed"]).status == "stale"
    assert result().status == "shown only" and result(None).status == "shown only"
    assert result(True, None).status == "reproduced"
    assert result(True, False).status == "not reproduced"
    inconclusive = result(True)
    inconclusive.checks.append(Check("o", "", "", None, "inconclusive"))
    assert inconclusive.status == "inconclusive"
    inconclusive.checks.append(Check("p", "", "", False))
    assert inconclusive.status == "not reproduced"                  # a failure outweighs an undecided one
    assert result().verdict == "no checks" and result(None).verdict == "no checks"
    assert result(True, True, None).verdict == "all checks hold"
    assert inconclusive.verdict == "1/3 checks hold, 1 fails, 1 inconclusive"
    assert inconclusive.count("holds") == 1 and inconclusive.count("shown") == 0
    floors = ReproResult("t", {}, "", [Check("f", "", "", True, kind="floor"), Check("e", "", "", True, kind="effort")],
                         record={})
    assert floors.status == "runs as expected" and floors.verdict == "all checks hold"
    floors.checks.append(Check("o", "", "", True, kind="ordering"))
    assert floors.status == "reproduced"
    floors.checks.append(Check("m", "", "not run: ['w']", None, "not run", kind="ordering"))
    assert floors.status == "incomplete" and floors.verdict == "3/4 checks hold, 1 not run"
    floors.checks.append(Check("i", "", "", None, "inconclusive", kind="ordering"))
    assert floors.status == "incomplete"                 # a missing row outweighs an undecided one
    floors.checks.append(Check("r", "", "", False, kind="rows"))
    assert floors.status == "refused"
    floors.checks.append(Check("p", "", "", False))
    assert floors.status == "refused"                    # equal rows outweigh a failure: the table is not valid


def test_paper_values_hold_within_their_tolerance_and_a_missing_row_is_not_run():
    from fgx.tables.checks import compare

    rep = _report([_run("x", s, 0.80 + 0.01 * s) for s in range(3)] + [_run("y", s, 0.70) for s in range(3)])
    t = {"rows": [{"where": {"method": "x"}, "paper": 0.82, "tolerance": 0.02},     # mean 0.81: within
                  {"where": {"method": "y"}, "paper": 0.75, "tolerance": 0.02},     # 0.70: outside
                  {"where": {"method": "y"}, "paper": 0.75},                        # no tolerance: shown
                  {"where": {"method": "z"}, "paper": 0.5, "tolerance": 0.1}]}      # no such row
    checks = compare(rep, t, "accuracy")
    assert _outcomes(checks) == [("accuracy of method=x (|Δ| ≤ 0.02)", "holds"),
                                 ("accuracy of method=y (|Δ| ≤ 0.02)", "fails"),
                                 ("accuracy of method=y", "shown"), ("accuracy of method=z", "not run")]
    assert checks[0].paper == "0.8200" and checks[0].fgx == "0.8100 ± 0.0100"
    assert checks[1].fgx == "0.7000 ± 0.0000" and checks[3].fgx == "no completed run"


def test_a_target_written_as_1e_5_matches_a_run_of_1e_05():
    from fgx.report.runs import Run
    from fgx.report.table import build_report
    from fgx.tables.checks import compare

    runs = [Run(Path(f"r{s}"), "completed", {"lr": "1e-05", "seed": str(s)},
                {"final": {"accuracy": 0.5}, "seed": s, "main_metric": "accuracy"}) for s in range(2)]
    rep = build_report(runs, by=["lr"], metrics=["accuracy"])
    [c] = compare(rep, {"rows": [{"where": {"lr": 1e-5}, "paper": 0.5, "tolerance": 0.01}]}, "accuracy")
    assert c.outcome == "holds"


def test_an_ordering_names_a_missing_row_and_states_its_direction_and_scope():
    from fgx.report.runs import Run
    from fgx.report.table import build_report
    from fgx.tables.checks import compare, ordering_checks

    runs = [_run("x", s, 0.80 + 0.001 * s) for s in range(3)] + [_run("y", s, 0.70) for s in range(3)]
    [c] = ordering_checks(_report(runs), {"key": "method", "order": ["x", "w"]}, "accuracy")
    assert c.outcome == "not run" and c.ok is None and c.fgx == "not run: ['w']" and c.paper == "x ≥ w"
    [c] = ordering_checks(_report(runs), {"key": "method", "order": ["y", "x"], "lower_is_better": True}, "accuracy")
    assert c.outcome == "holds" and c.what == "accuracy: y ≤ x" and c.paper == "y ≤ x"
    # a scope: only the groups with that value take part
    scoped = [Run(Path(f"{m}{h}{s}"), "completed", {"method": m, "hidden": str(h), "seed": str(s)},
                  {"final": {"accuracy": acc + 0.001 * s}, "seed": s, "main_metric": "accuracy",
                   "sampling_se": {"accuracy": 0.0}})
              for m, h, acc in (("x", 8, 0.9), ("y", 8, 0.8), ("x", 16, 0.1), ("y", 16, 0.8)) for s in range(3)]
    rep = build_report(scoped, by=["method", "hidden"], metrics=["accuracy"])
    [c] = ordering_checks(rep, {"key": "method", "order": ["x", "y"], "where": {"hidden": 8}}, "accuracy")
    assert c.outcome == "holds" and c.what == "accuracy: x ≥ y where hidden=8"
    [c] = ordering_checks(rep, {"key": "method", "order": ["x", "y"], "where": {"hidden": 16}}, "accuracy")
    assert c.outcome == "fails"
    # three rows: one check per adjacent pair, through compare with the ordering's own metric
    runs += [_run("z", s, 0.60) for s in range(3)]
    checks = compare(_report(runs), {"ordering": [{"key": "method", "order": ["x", "y", "z"]}]}, "accuracy")
    assert [c.what for c in checks] == ["accuracy: x ≥ y", "accuracy: y ≥ z"]


def test_the_floor_is_the_majority_rate_for_accuracy_and_one_half_for_roc_auc():
    from fgx.tables.checks import floor_checks

    runs = [_run("x", s, 0.80, majority=0.70) for s in range(2)] + [_run("y", s, 0.72, majority=0.70) for s in range(2)]
    checks = floor_checks(_report(runs), runs, "accuracy", 0.05)
    assert _outcomes(checks) == [("method=x: accuracy ≥ the majority-class rate + 0.05", "holds"),
                                 ("method=y: accuracy ≥ the majority-class rate + 0.05", "fails")]
    assert checks[0].paper == "≥ 0.7500" and checks[1].fgx == "0.7200"
    auc = [_run("x", s, 0.56, metric="roc_auc") for s in range(2)] + [_run("y", s, 0.54, metric="roc_auc") for s in range(2)]
    checks = floor_checks(_report(auc, "roc_auc"), auc, "roc_auc", 0.05)
    assert [c.outcome for c in checks] == ["holds", "fails"] and checks[0].paper == "≥ 0.5500"
    f1 = [_run("x", s, 0.1, metric="f1_minority") for s in range(2)]
    assert floor_checks(_report(f1, "f1_minority"), f1, "f1_minority", 0.05) == []


def test_seed_terms_pair_the_runs_replicates_else_bound_by_their_standard_errors():
    import numpy as np

    from fgx.metrics import encode_replicates
    from fgx.tables.checks import _state_metric, base_metric, seed_terms

    def run(method, seed, acc, reps=None, split="k", se=None, state="best_client"):
        summary = {"final": {"accuracy": acc}, "best_client": {"test": {"accuracy": acc}}, "seed": seed,
                   "main_metric": "accuracy"}
        if reps is not None:
            summary["sampling"] = {"split": {state: split}, state: {"accuracy": encode_replicates(np.array(reps))}}
        if se is not None:
            summary["sampling_se"] = {"accuracy": se}
        return _run_with(method, seed, summary)

    ra, rb = [0.5, 0.75, 0.25, 0.5], [0.25, 0.5, 0.5, 0.25]
    runs = [run("x", 0, 0.8, ra), run("y", 0, 0.7, rb),                     # replicates on the same split
            run("x", 1, 0.8, ra, split="k1"), run("y", 1, 0.7, rb, split="k2"),   # other items: not paired
            run("x", 2, 0.8, se=0.01), run("y", 2, 0.7, se=0.02),          # an earlier record: the bound
            run("x", 3, 0.8), run("y", 3, 0.7, se=0.02),                    # one run without: no term
            run("x", 4, 0.8, ra, state="best")]
    rep = _report(runs, "best_client_accuracy")
    t = seed_terms(rep, {"method": "x"}, {"method": "y"}, "best_client_accuracy")
    assert list(t["0"].reps) == pytest.approx([0.25, 0.25, -0.25, 0.25], abs=1e-3) and t["0"].key == "k"
    assert t["1"].reps is None and t["1"].bound == pytest.approx(np.std(ra, ddof=1) + np.std(rb, ddof=1), abs=1e-3)
    assert t["2"].reps is None and t["2"].bound == pytest.approx(0.03) and t["3"] is None and "4" not in t
    # a column that is not a test metric of a model state has no term (an unlearning cost, bytes)
    assert set(seed_terms(rep, {"method": "x"}, {"method": "y"}, "MB").values()) == {None}
    assert _state_metric({"best": {"test": {"f1": 1}}}, "best_f1") == ("best", "f1")
    assert _state_metric({"final": {"mse": 1}}, "mse") == ("final", "mse")
    assert _state_metric({"final": {"mse": 1}}, "unlearning_mean_total_s") is None
    assert base_metric("best_client_accuracy") == "accuracy" and base_metric("best_f1") == "f1"
    assert base_metric("accuracy") == "accuracy"


def _run_with(method, seed, summary, status="completed"):
    from fgx.report.runs import Run

    return Run(Path(f"{method}{seed}"), status, {"method": method, "seed": str(seed)}, summary)


def test_a_table_from_runs_reads_main_and_says_how_orderings_are_decided():
    from fgx.tables.checks import table_from_runs
    from fgx.tables.stats import TEST_NAME

    runs = [_run("x", s, 0.80 + 0.001 * s) for s in range(3)] + [_run("y", s, 0.70) for s in range(3)]
    t = {"by": ["method"], "metric": "{main}", "ordering": [{"key": "method", "order": ["x", "y"], "metric": "{main}"}],
         "floor": 0.0}
    res = table_from_runs("t", t, runs)
    assert res.extra["metric"] == "accuracy" and [c.what for c in res.checks] == ["accuracy: x ≥ y"]
    assert res.checks[0].outcome == "holds" and TEST_NAME in res.notes[0]
    assert [r["method"] for r in res.extra["table"]] == ["x", "y"]
    assert table_from_runs("t", {"by": ["method"], "metric": "accuracy"}, runs).notes == []


def _effort(*args, **kwargs):
    """effort_check, and every check it returns is the one named "equal effort"."""
    from fgx.tables.checks import effort_check

    c = effort_check(*args, **kwargs)
    assert c is None or (c.what, c.paper) == ("equal effort", "every row given its values the same way")
    return c


def _effort_record(rows, configs=None, seeds=(0, 1)):
    configs = configs or {m: {"rounds": 10, "algorithm": {"lr": 0.01}} for m in rows}
    return {"runs": [{"overrides": {"method": m, "seed": str(s)}, "config_sha": m} for m in rows for s in seeds],
            "configs": configs}


def test_equal_effort_by_the_authors_needs_a_source_for_every_row(tmp_path):
    from fgx.tables.checks import effort_check

    conf, sweep = tmp_path / "conf", {"method": "a,b", "seed": "0,1"}
    rec = _effort_record(["a", "b"])
    c = _effort(conf, "t", rec, {"effort": "authors", "sources": {"a": "Table 3", "b": "their code"}}, {}, sweep)
    assert c.ok and c.fgx == "the authors' values for every row: a: Table 3; b: their code"
    c = _effort(conf, "t", rec, {"effort": "authors", "sources": {"a": "Table 3", "b": "fgx defaults"}}, {}, sweep)
    assert c.ok is False and c.fgx == "no authors' source for b (sources in the targets)"
    c = _effort(conf, "t", rec, {"effort": "authors", "sources": {"a": "Table 3", "b": " "}}, {}, sweep)
    assert c.ok is False and "for b " in c.fgx
    c = _effort(conf, "t", rec, {}, {}, sweep)                  # nothing declared: not equal effort
    assert c.ok is False and c.fgx == "effort (targets) is None, not one of ['tuned', 'shared', 'authors']"
    assert _effort(conf, "t", _effort_record(["a"]), {"effort": "authors"}, {}, sweep) is None   # one row
    # a row with a tuned file while the table declares the authors' values
    (conf / "tuned" / "t").mkdir(parents=True)
    (conf / "tuned" / "t" / "b.yaml").write_text("algorithm: {lr: 0.1}\n")
    c = _effort(conf, "t", rec, {"effort": "authors", "sources": {"a": "x", "b": "y"}}, {}, sweep)
    assert c.ok is False and c.fgx == "declared authors, but tuned files exist for b"
    c = _effort(conf, "t", rec, {"effort": "tuned"}, {}, sweep)  # tuned files, but no `fgx tune` record
    assert c.ok is False and c.fgx == "declared tuned; not tuned by `fgx tune t`: a, b"


def test_equal_effort_shared_needs_the_same_optimisation_values_in_every_row(tmp_path):
    from fgx.tables.checks import effort_check

    conf, sweep, t = tmp_path / "conf", {"method": "a,b"}, {"effort": "shared"}
    c = _effort(conf, "t", _effort_record(["a", "b"]), t, {}, sweep)
    assert c.ok and c.fgx.startswith("one method's ablations on the same values")
    differ = {"a": {"rounds": 10, "algorithm": {"lr": 0.01}}, "b": {"rounds": 10, "algorithm": {"lr": 0.05}}}
    c = _effort(conf, "t", _effort_record(["a", "b"], differ), t, {}, sweep)
    assert c.ok is False and c.fgx == "declared shared, but rows differ in ['algorithm.lr']"
    one_missing = {"a": {"rounds": 10}}
    c = _effort(conf, "t", _effort_record(["a", "b"], one_missing), t, {}, sweep)
    assert c.ok is False and c.fgx == "declared shared; some rows' configs are missing from the record"
    # a value only one row sets is not a difference (the other row's config has no such key)
    partial = {"a": {"rounds": 10, "algorithm": {"lr": 0.01, "weight_decay": 5e-4}}, "b": {"rounds": 10, "algorithm": {"lr": 0.01}}}
    assert _effort(conf, "t", _effort_record(["a", "b"], partial), t, {}, sweep).ok


def test_an_interval_that_touches_zero_does_not_exclude_it(monkeypatch):
    """holds/fails need the interval strictly on one side of 0: gaps 1 and 3 with a t quantile of 2
    give exactly [0, 4] (and [-4, 0] the other way), which is inconclusive."""
    from scipy import stats

    monkeypatch.setattr(stats.t, "ppf", lambda q, df: 2.0)
    p = paired_outcome({0: 1.0, 1: 3.0}, {0: 0.0, 1: 0.0})
    assert (p.low, p.high, p.outcome) == (0.0, 4.0, "inconclusive")
    q = paired_outcome({0: 0.0, 1: 0.0}, {0: 1.0, 1: 3.0})
    assert (q.low, q.high, q.outcome) == (-4.0, 0.0, "inconclusive")


def test_seeds_may_be_named_by_numbers_and_by_strings_at_once():
    p = paired_outcome({0: 0.9, "1": 0.8, 2: 0.85}, {0: 0.5, "1": 0.4, 2: 0.45}, items=exact({0: 0, "1": 0, 2: 0}))
    assert p.n == 3 and p.outcome == "holds"


def test_equal_effort_tuned_needs_equal_budgets_the_hinge_in_the_grid_and_the_tuned_values_used(tmp_path, monkeypatch):
    from fgx.tables.checks import effort_check

    conf, sweep, t = tmp_path / "conf", {"method": "a,b", "seed": "0,1"}, {"effort": "tuned"}
    (conf / "tuned" / "t").mkdir(parents=True)
    for m, lr in (("a", 0.01), ("b", 0.05)):
        (conf / "tuned" / "t" / f"{m}.yaml").write_text(f"algorithm:\n  lr: {lr}\n")
    configs = {"a": {"algorithm": {"lr": 0.01}}, "b": {"algorithm": {"lr": 0.05}}}
    record = _effort_record(["a", "b"], configs)
    results = tmp_path / "results"
    results.mkdir()
    monkeypatch.setenv("FGX_RESULTS_DIR", str(results))

    def tuned(methods):
        (results / "t.tune.json").write_text(json.dumps({"methods": methods}))
        return _effort(conf, "t", record, t, {"hinge": ["algorithm.mu"]}, sweep)

    three, two = [{}, {}, {}], [0, 1]
    c = tuned({"a": {"trials": three, "hinge": {}, "seeds": two}, "b": {"trials": three, "hinge": {}, "seeds": two}})
    assert c.ok and c.fgx == "every row tuned by `fgx tune t` (3 trials each; hinge keys ['algorithm.mu'])"
    c = tuned({"a": {"trials": three, "hinge": {}, "seeds": two},
               "b": {"trials": three, "hinge": {}, "seeds": two, "open_edges": ["algorithm.lr"]}})
    assert c.ok is False and c.fgx == ("every row tuned by `fgx tune t` (3 trials each; hinge keys ['algorithm.mu']); "
                                       "chosen at an open grid edge (the optimum may lie outside; `fgx tune t` grows "
                                       "the grid): b algorithm.lr")
    # a record made before grids grew: its open edges are found from its grid and choice; one seed is named
    grid = {"algorithm.lr": [0.01, 0.05, 0.25], "algorithm.weight_decay": [0.0, 0.001]}
    c = tuned({"a": {"trials": three, "hinge": {}, "seeds": [0], "grid": grid,
                     "chosen": {"algorithm.lr": 0.05, "algorithm.weight_decay": 0.0}},
               "b": {"trials": three, "hinge": {}, "seeds": two, "grid": grid,
                     "chosen": {"algorithm.lr": 0.25, "algorithm.weight_decay": 0.001}}})
    assert c.ok is False and c.fgx.endswith("grows the grid): b algorithm.lr, b algorithm.weight_decay; "
                                            "tuned on one seed: a")
    # the budget is the base grid: a grid grown past an edge is not a larger budget
    c = tuned({"a": {"trials": three, "hinge": {}, "seeds": two},
               "b": {"trials": three + three, "base_points": 3, "hinge": {}, "seeds": two}})
    assert c.ok
    c = tuned({"a": {"trials": three, "hinge": {}}, "b": {"trials": three[:2], "hinge": {}}})
    assert c.ok is False and c.fgx == "unequal tuning budgets (trials: {'a': 3, 'b': 2})"
    c = tuned({"a": {"trials": three, "hinge": {"algorithm.mu": False}}, "b": {"trials": three}})
    assert c.ok is False and c.fgx == ("the grid leaves out the knob the comparison hinges on "
                                       "(a: algorithm.mu; b: tuned before hinge keys were recorded)")
    c = tuned({"a": {"trials": three, "hinge": {}}})
    assert c.ok is False and c.fgx == "declared tuned; not tuned by `fgx tune t`: b"
    # a run of b without b's tuned learning rate
    record["configs"]["b"] = {"algorithm": {"lr": 0.01}}
    c = tuned({"a": {"trials": three, "hinge": {}}, "b": {"trials": three, "hinge": {}}})
    assert c.ok is False and c.fgx == ("runs without their row's tuned values: b seed 0 (algorithm.lr: 0.01 ≠ 0.05); "
                                       "b seed 1 (algorithm.lr: 0.01 ≠ 0.05)")
    both = {"a": {"trials": three, "hinge": {}, "seeds": two}, "b": {"trials": three, "hinge": {}, "seeds": two}}
    record["runs"] += [{"overrides": {"method": "b", "seed": str(sd)}, "config_sha": "b"} for sd in range(2, 4)]
    c = tuned(both)                                                  # four: all listed
    assert c.fgx.endswith("b seed 3 (algorithm.lr: 0.01 ≠ 0.05)") and c.fgx.count("b seed") == 4
    record["runs"].append({"overrides": {"method": "b", "seed": "4"}, "config_sha": "b"})
    assert tuned(both).fgx.endswith("b seed 3 (algorithm.lr: 0.01 ≠ 0.05) (and 1 more)")
    record["runs"].append({"overrides": {"method": "b", "seed": "5"}, "config_sha": "b"})
    c = tuned(both)
    assert c.fgx.endswith("b seed 3 (algorithm.lr: 0.01 ≠ 0.05) (and 2 more)") and c.fgx.count("b seed") == 4
    # values tuned on another configuration of the data, while this one has files of its own
    (conf / "tuned" / "u").mkdir()
    (conf / "tuned" / "u" / "a.yaml").write_text("algorithm:\n  lr: 0.02\n")
    c = _effort(conf, "u", record, t, {}, sweep, tuned_from="t")
    assert c.ok is False and c.fgx == ("runs the values tuned for t, but conf/tuned/u/ also has files for a, "
                                       "which it does not read")


def test_the_rows_key_is_method_else_a_swept_algorithm():
    from fgx.tables.checks import _select, _with_main, row_key

    assert row_key({"method": "a,b", "algorithm": "x"}) == "method"
    assert row_key({"algorithm": "x,y"}) == "algorithm" and row_key({"seed": "0,1"}) is None
    assert _select({"a": {"b": {"c": 3}}}, "a.b.c") == 3 and _select({"a": {"b": 1}}, "a.b.c") is None
    assert _select({"a": 1}, "b") is None
    t = _with_main({"metric": "best_{main}", "ordering": [{"metric": "{main}"}, {"key": "method"}]}, "f1")
    assert t["metric"] == "best_f1" and t["ordering"] == [{"metric": "f1"}, {"key": "method"}]


def test_checks_carry_their_mark_and_paper_values_stay_beside_orderings():
    from fgx.report.runs import Run
    from fgx.report.table import build_report
    from fgx.tables.checks import compare

    def run(m, s, acc, f1):
        return Run(Path(f"{m}{s}"), "completed", {"method": m, "seed": str(s)},
                   {"final": {"accuracy": acc + 0.001 * s, "f1": f1 + 0.001 * s}, "seed": s, "main_metric": "accuracy",
                    "sampling_se": {"accuracy": 0.0, "f1": 0.0}})

    # x is ahead on accuracy but behind on f1: an ordering with its own metric is decided on that metric
    runs = [run("x", s, 0.8, 0.5) for s in range(3)] + [run("y", s, 0.7, 0.6) for s in range(3)] + \
        [run("v", 0, 0.75, 0.5)]
    rep = build_report(runs, by=["method"], metrics=["accuracy", "f1"])
    t = {"rows": [{"where": {"method": "w"}, "paper": 0.8, "tolerance": 0.1},            # missing, and not last
                  {"where": {"method": "x"}, "paper": 0.9, "tolerance": 0.099},          # |0.801 - 0.9| = 0.099
                  {"where": {"method": "y"}, "paper": 0.75, "tolerance": 0.04},           # 0.701: outside
                  {"where": {"method": "v"}, "paper": "n/a"}],
         "ordering": [{"key": "method", "order": ["x", "y"]}, {"key": "method", "order": ["x", "y"], "metric": "f1"}]}
    checks = compare(rep, t, "accuracy")
    assert [(c.what, c.ok, c.outcome) for c in checks] == [
        ("accuracy of method=w", None, "not run"), ("accuracy of method=x (|Δ| ≤ 0.099)", True, "holds"),
        ("accuracy of method=y (|Δ| ≤ 0.04)", False, "fails"), ("accuracy of method=v", None, "shown"),
        ("accuracy: x ≥ y", True, "holds"), ("f1: x ≥ y", False, "fails")]
    assert checks[0].paper == "0.8000" and checks[3].paper == "n/a" and checks[3].fgx == "0.7500"   # one seed: no ±
    [w] = compare(rep, {"rows": [{"where": {"method": "w"}}]}, "accuracy")
    assert (w.paper, w.fgx) == ("-", "no completed run")
    # a gap exactly at the tolerance holds (0.75 and 0.25 are exact in binary)
    exact = _report([_run("e", s, 0.75) for s in range(2)])
    [e] = compare(exact, {"rows": [{"where": {"method": "e"}, "paper": 0.5, "tolerance": 0.25}]}, "accuracy")
    assert e.ok is True
    # an ordering check's mark follows its outcome; a missing row's check names the ordering
    from fgx.tables.checks import ordering_checks
    [c] = ordering_checks(rep, {"key": "method", "order": ["y", "x"]}, "accuracy")
    assert (c.ok, c.outcome) == (False, "fails")
    [c] = ordering_checks(rep, {"key": "method", "order": ["x", "v"]}, "accuracy")   # one paired seed
    assert (c.ok, c.outcome) == (None, "inconclusive")
    [c] = ordering_checks(rep, {"key": "method", "order": ["x", "w"], "lower_is_better": True,
                                "where": {"method": "x"}}, "accuracy")
    assert c.what == "ordering of accuracy by method where method=x" and c.paper == "x ≤ w" and c.ok is None


def test_the_floor_is_met_at_equality_and_every_group_with_a_rate_is_checked():
    from fgx.tables.checks import floor_checks

    runs = [_run("a", s, 0.75, majority=0.70) for s in range(2)] + [_run("b", s, 0.9) for s in range(2)] + \
        [_run("c", s, 0.60, majority=0.70) for s in range(2)]
    checks = floor_checks(_report(runs), runs, "accuracy", 0.05)
    assert [(c.what.split(":")[0], c.ok) for c in checks] == [("method=a", True), ("method=c", False)]
    auc = [_run("x", s, 0.6, metric="roc_auc") for s in range(2)]
    [c] = floor_checks(_report(auc, "roc_auc"), auc, "roc_auc", 0.1)
    assert c.what == "method=x: roc_auc ≥ ROC-AUC 0.5 + 0.1" and c.ok


def test_equal_rows_are_found_next_to_each_other_on_exactly_two_shared_seeds():
    sweep = {"method": "a,b,c"}
    runs = [_entry(m, s, 0.5 + 0.01 * s) for m in ("a", "b") for s in range(2)] + [_entry("c", 0, 0.9)]
    notes = equal_rows_notes({"runs": runs}, sweep)
    assert notes == ["rows differ: method=a, method=b: equal in every number on all 2 shared seeds: its mechanism "
                     "never acted in this protocol, so a is b relabelled; change the preset so it can act, or drop "
                     "the row"]
    # b also ran a seed a did not: only the shared seeds are compared
    runs.append(_entry("b", 2, 0.1))
    assert len(equal_rows_notes({"runs": runs}, sweep)) == 1
    # the same final number but another best round: not equal in every number
    other = _entry("b", 1, 0.51)
    other["summary"]["best"]["round"] = 2
    assert equal_rows_notes({"runs": runs[:3] + [other]}, sweep) == []
    assert equal_rows_notes({"runs": runs}, {"seed": "0,1"}) == []


def test_progress_notes_name_rows_over_the_threshold_and_runs_without_a_row():
    from fgx.tables.checks import progress_notes

    runs = [_entry("a", 0, 0.5, gain=0.005), _entry("b", 0, 0.5, gain=0.0051)]
    notes = progress_notes({"runs": runs}, {"method": "a,b"})
    assert notes == ["Validation gain in the last 10 % of rounds (mean over seeds): a +0.0050, b +0.0051.",
                     "Still improving at the end (gain > 0.005): b; these rows are under-trained at this protocol."]
    lone = {"overrides": {"seed": "0"}, "progress": {"gain_last_10pct": 0.0}}
    assert progress_notes({"runs": [lone]}, {"seed": "0"}) == \
        ["Validation gain in the last 10 % of rounds (mean over seeds): - +0.0000."]
    assert progress_notes({}, {"method": "a"}) == []
    two = progress_notes({"runs": runs + [_entry("c", 0, 0.5, gain=0.01)]}, {"method": "a,b,c"})
    assert two[1].startswith("Still improving at the end (gain > 0.005): b, c;")


def test_a_table_from_runs_uses_its_own_metric_grouping_and_floor():
    from fgx.tables.checks import table_from_runs

    runs = [_run("x", s, 0.80 + 0.001 * s, majority=0.5) for s in range(3)] + \
        [_run("y", s, 0.70 + 0.001 * s, majority=0.5) for s in range(3)]
    for r in runs:
        r.summary["final"]["f1"] = 0.3 if r.overrides["method"] == "x" else 0.4
        r.overrides["hidden"] = "8" if r.overrides["method"] == "x" else "16"     # grouped by method alone
    res = table_from_runs("t", {"by": ["method"], "metric": "f1", "floor": 0.1,
                                "ordering": [{"key": "method", "order": ["y", "x"], "metric": "accuracy"}]}, runs)
    assert res.name == "t" and res.targets["metric"] == "f1" and res.extra["metric"] == "f1"
    assert [r["method"] for r in res.extra["table"]] == ["x", "y"] and "hidden" not in res.extra["table"][0]
    assert "f1_mean" in res.extra["table"][0] and "accuracy_mean" in res.extra["table"][0]
    assert [c.what for c in res.checks] == ["accuracy: y ≥ x"] and res.checks[0].outcome == "fails"
    assert "| x" in res.table_markdown and res.problems == ""
    acc = table_from_runs("t", {"by": ["method"], "metric": "accuracy", "floor": 0.1}, runs + [
        _run("z", 0, 0.1, status="failed")])
    assert [c.ok for c in acc.checks] == [True, True] and acc.checks[0].paper == "≥ 0.6000"
    assert "1 run(s) not in the table" in acc.problems
    none = table_from_runs("t", {"by": ["method"]}, [_run("z", 0, 0.1, status="failed")])
    assert none.checks == [] and none.extra["metric"] is None


def test_checks_on_records_without_runs_and_lists_of_several_names(tmp_path, monkeypatch):
    from fgx.tables.checks import floor_checks

    monkeypatch.delenv("FGX_RESULTS_DIR", raising=False)           # the results beside conf/
    conf = tmp_path / "conf"
    assert _effort(conf, "t", {}, {"effort": "shared"}, {}, {"method": "a,b"}) is None
    assert equal_rows_notes({}, {"method": "a,b"}) == []
    bare = {"runs": [{"config_sha": "a"}, *_effort_record(["a", "b"])["runs"]], "configs": _effort_record(["a", "b"])["configs"]}
    assert _effort(conf, "t", bare, {"effort": "shared"}, {}, {"method": "a,b"}).ok
    # several names are listed with ", "
    (conf / "tuned" / "t").mkdir(parents=True)
    for m in ("a", "b"):
        (conf / "tuned" / "t" / f"{m}.yaml").write_text("algorithm:\n  lr: 0.01\n")
    rec, sweep = _effort_record(["a", "b"]), {"method": "a,b"}
    c = _effort(conf, "t", rec, {"effort": "authors", "sources": {"a": "x", "b": "y"}}, {}, sweep)
    assert c.fgx == "declared authors, but tuned files exist for a, b"
    c = _effort(conf, "t", rec, {}, {}, sweep)
    assert c.fgx == "effort (targets) is None, not one of ['tuned', 'shared', 'authors']; tuned: a, b"
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "t.tune.json").write_text(json.dumps({"methods": {m: {"trials": [{}], "hinge": {},
                                                                                  "open_edges": ["lr", "mu"]} for m in "ab"}}))
    c = _effort(conf, "t", rec, {"effort": "tuned"}, {}, sweep)
    assert c.ok is False and c.fgx == ("every row tuned by `fgx tune t` (1 trials each); chosen at an open grid edge "
                                       "(the optimum may lie outside; `fgx tune t` grows the grid): a lr, a mu, b lr, "
                                       "b mu; tuned on one seed: a, b")
    (tmp_path / "results" / "t.tune.json").write_text(json.dumps({"methods": {m: {"trials": [{}], "seeds": [0, 1]}
                                                                              for m in "ab"}}))
    assert _effort(conf, "t", rec, {"effort": "tuned"}, {}, sweep).fgx == "every row tuned by `fgx tune t` (1 trials each)"
    (tmp_path / "results" / "t.tune.json").write_text("{}")
    assert _effort(conf, "t", rec, {"effort": "tuned"}, {}, sweep).fgx == "declared tuned; not tuned by `fgx tune t`: a, b"
    # values tuned on another configuration of the same data: said so
    c = _effort(conf, "u", rec, {"effort": "tuned"}, {}, sweep, tuned_from="t")
    assert c.ok is False and "fgx tune t" in c.fgx
    (tmp_path / "results" / "t.tune.json").write_text(json.dumps({"methods": {m: {"trials": [{}], "seeds": [0, 1]}
                                                                              for m in "ab"}}))
    c = _effort(conf, "u", rec, {"effort": "tuned"}, {}, sweep, tuned_from="t")
    assert c.ok and c.fgx == ("every row tuned by `fgx tune t` (1 trials each, on validation of t, applied to this "
                              "configuration alike)")
    (conf / "tuned" / "u").mkdir()
    for m in ("a", "b"):
        (conf / "tuned" / "u" / f"{m}.yaml").write_text("algorithm:\n  lr: 0.02\n")
    assert _effort(conf, "u", rec, {"effort": "tuned"}, {}, sweep, tuned_from="t").fgx.startswith(
        "runs the values tuned for t, but conf/tuned/u/ also has files for a, b,")
    c = _effort(conf, "s", rec, {"effort": "shared"}, {}, sweep)
    assert c.fgx == ("one method's ablations on the same values (rounds, algorithm.lr, algorithm.weight_decay, "
                     "algorithm.optimizer, algorithm.local_steps, algorithm.local_epochs, algorithm.batch_size, model)")
    c = _effort(conf, "s", rec, {"effort": "authors", "sources": {"a": "", "b": "default values"}}, {}, sweep)
    assert c.fgx == "no authors' source for a, b (sources in the targets)"
    # two grouping keys: the floor names both
    from fgx.report.runs import Run
    from fgx.report.table import build_report
    runs = [Run(Path(f"{m}{h}{s}"), "completed", {"method": m, "hidden": h, "seed": str(s)},
                {"final": {"roc_auc": 0.9 - 0.1 * (m == "y") + 0.001 * s}, "seed": s, "main_metric": "roc_auc"})
            for m in ("x", "y") for h in ("8", "16") for s in range(3)]
    rep = build_report(runs, by=["method", "hidden"], metrics=["roc_auc"])
    assert floor_checks(rep, runs, "roc_auc", 0.1)[0].what == "method=x, hidden=8: roc_auc ≥ ROC-AUC 0.5 + 0.1"


def test_a_target_value_matches_a_run_written_another_way_and_two_seeds_show_a_spread():
    from fgx.report.runs import Run
    from fgx.report.table import build_report
    from fgx.tables.checks import compare

    runs = [Run(Path(f"r{s}"), "completed", {"lr": "1e-4", "seed": str(s)},
                {"final": {"accuracy": 0.5 + 0.1 * s}, "seed": s, "main_metric": "accuracy"}) for s in range(2)]
    rep = build_report(runs, by=["lr"], metrics=["accuracy"])
    [c] = compare(rep, {"rows": [{"where": {"lr": 0.0001, "seed": 1}, "paper": 0.55, "tolerance": 0.01}]}, "accuracy")
    assert c.what.startswith("accuracy of lr=0.0001, seed=1")
    [c] = compare(rep, {"rows": [{"where": {"lr": 0.0001}, "paper": 0.55, "tolerance": 0.01}]}, "accuracy")
    assert c.ok and c.fgx == "0.5500 ± 0.0707"                      # two seeds: the spread is shown


def test_equal_rows_compare_final_best_and_best_client_whatever_their_key_order():
    sweep = {"method": "a,b"}

    def runs(**b_changes):
        out = [_entry(m, s, 0.5) for m in ("a", "b") for s in range(2)]
        for e in out:
            e["summary"]["best_client"] = {"accuracy": 0.6}
        for e in out[2:]:
            for k, v in b_changes.items():
                e["summary"][k] = v
        return out

    assert len(equal_rows_notes({"runs": runs()}, sweep)) == 1
    assert equal_rows_notes({"runs": runs(final={"accuracy": 0.4})}, sweep) == []
    assert equal_rows_notes({"runs": runs(best_client={"accuracy": 0.7})}, sweep) == []
    # the same numbers written in another key order are the same numbers
    reordered = runs(best={"test": {"accuracy": 0.5}, "val": 0.5, "round": 3})
    assert len(equal_rows_notes({"runs": reordered}, sweep)) == 1


def test_a_table_without_a_metric_takes_the_first_and_orderings_without_one_take_the_tables():
    from fgx.tables.checks import table_from_runs

    runs = [_run("x", s, 0.80 + 0.001 * s) for s in range(3)] + [_run("y", s, 0.70 + 0.001 * s) for s in range(3)]
    res = table_from_runs("t", {"by": ["method"], "ordering": [{"key": "method", "order": ["x", "y"]}]}, runs)
    assert res.extra["metric"] == "accuracy" and [c.what for c in res.checks] == ["accuracy: x ≥ y"]
    res = table_from_runs("t", {"by": ["method"], "metric": "accuracy",
                                "rows": [{"where": {"method": "w"}, "paper": 0.5}]}, [_run("z", 0, 0.1, status="failed")])
    # no completed run: the paper value is still a check, "not run" (it cannot read as nothing to check)
    assert [(c.what, c.outcome) for c in res.checks] == [("accuracy of method=w", "not run")]


# -- the ordering test's error rates, by simulation (fgx/tables/stats.py; docs/tables.md) --------------
# A population of test items; item i's correctness under method m on seed s is
# 1[mu_m + u_ms + z_i + e_im + eps_ims > 0] (z: the item's difficulty, e: how method m fares on it, fixed
# across seeds; u: the seed; eps: what changes per seed), so the population accuracy of m is
# Phi(mu_m / S) with S = sqrt(sigma_u^2 + 1 + tau^2 + sigma_eps^2) and the true gap is known. A run is
# scored as fgx scores one (the mean over clients of each client's accuracy) and keeps replicates drawn as
# a run draws them (fgx.metrics: one stream over the items' ids). A test split shared by the seeds makes
# the items' own noise common to every seed: the test must not read it as signal.
SIM = dict(n_items=300, tau=1.0, eps=0.3, sigma_u=0.05, clients=3)


def _true_gap(mu_a: float, mu_b: float) -> float:
    from scipy import stats

    s = (SIM["sigma_u"] ** 2 + 1 + SIM["tau"] ** 2 + SIM["eps"] ** 2) ** 0.5
    return float(stats.norm.cdf(mu_a / s) - stats.norm.cdf(mu_b / s))


def _simulated_runs(rng, mus: list[float], seeds: int = 5, shared: bool = True, overlap: bool = False) -> list[dict]:
    """Per method, {seed: (its metric, its test-item replicates, its split key)}."""
    import numpy as np
    import torch

    from fgx.metrics import bootstrap_item_means, split_key

    n, G = SIM["n_items"], SIM["clients"]
    out = [{} for _ in mus]

    def draw_items():
        return rng.normal(size=n), rng.normal(0, SIM["tau"], (len(mus), n)), rng.integers(1 << 40)

    z, e, base = draw_items()
    for s in range(seeds):
        if not shared:
            z, e, base = draw_items()              # the seed draws its own test split: other items, other ids
        if overlap:                                # every item in two of the three clients
            first = rng.integers(G, size=n)
            ids = np.concatenate([np.arange(n), np.arange(n)])
            group = np.concatenate([first, (first + 1 + rng.integers(G - 1, size=n)) % G])
        else:
            ids, group = np.arange(n), rng.integers(G, size=n)
        gid = torch.tensor(ids + base)
        for m, mu in enumerate(mus):
            logit = mu + rng.normal(0, SIM["sigma_u"]) + z[ids] + e[m][ids] + rng.normal(0, SIM["eps"], ids.size)
            correct = (logit > 0).astype(float)
            value = float(np.mean([correct[group == c].mean() for c in range(G)]))
            reps = bootstrap_item_means({"accuracy": torch.tensor(correct)}, torch.tensor(group), G, gid)["accuracy"]
            out[m][s] = (value, reps, split_key(gid))
    return out


def _test(runs, a: int, b: int):
    va, vb = ({s: v[0] for s, v in runs[m].items()} for m in (a, b))
    items = {s: SeedTerm(runs[a][s][1] - runs[b][s][1], runs[a][s][2]) for s in va}
    return paired_outcome(va, vb, items=items)


def _rates(rng, mus, reps: int, **kw) -> tuple[float, float]:
    """(share of simulated tables where a ≥ b was decided either way, share whose interval held the true gap)."""
    truth = _true_gap(*mus)
    decided = covered = 0
    for _ in range(reps):
        p = _test(_simulated_runs(rng, mus, **kw), 0, 1)
        decided += p.outcome != "inconclusive"
        covered += p.low <= truth <= p.high
    return decided / reps, covered / reps


def _bound(rate: float, reps: int) -> float:
    return rate + 2 * (rate * (1 - rate) / reps) ** 0.5        # two binomial SDs of slack for a finite simulation


@pytest.mark.parametrize("shared,overlap", [
    (True, False),
    pytest.param(False, False, marks=pytest.mark.slow), pytest.param(True, True, marks=pytest.mark.slow)],
    ids=["split shared by the seeds", "a split per seed", "overlapping clients"])
def test_the_ordering_test_keeps_its_false_positive_rate_and_covers_the_true_gap(shared, overlap):
    import numpy as np

    rng = np.random.default_rng(64)
    reps = 200
    false_pos, covered0 = _rates(rng, [0.3, 0.3], reps, shared=shared, overlap=overlap)        # Δ = 0
    assert false_pos <= _bound(0.05, reps) and covered0 >= 0.95 - 2 * (0.05 * 0.95 / reps) ** 0.5
    decided, covered = _rates(rng, [0.45, 0.3], reps, shared=shared, overlap=overlap)           # Δ ≈ +0.04
    assert abs(covered - 0.95) <= 2 * (0.05 * 0.95 / reps) ** 0.5 + 0.01
    assert decided > false_pos                                                                   # it has power


def test_without_the_items_term_a_shared_split_reads_its_own_noise_as_a_gap(monkeypatch):
    """The items' term is what keeps the rate: dropped, the seeds' t-test decides most Δ = 0 tables."""
    import numpy as np

    from fgx.tables import stats

    monkeypatch.setattr(stats, "shared_variance", lambda reps: 0.0)
    false_pos, _ = _rates(np.random.default_rng(64), [0.3, 0.3], 100, shared=True)
    assert false_pos > 0.3


def test_holm_keeps_a_tables_family_wise_rate_where_single_tests_do_not():
    """A table of five orderings of one method against four others, every gap 0: without an adjustment one
    ordering or more is decided in ~1 of 5 tables; with Holm's step-down at most 5 %."""
    import numpy as np

    from fgx.tables.stats import adjust

    rng, reps, m = np.random.default_rng(7), 120, 5
    any_raw = any_holm = 0
    for _ in range(reps):
        runs = _simulated_runs(rng, [0.3] * (m + 1), shared=True)
        tests = [_test(runs, 0, j) for j in range(1, m + 1)]
        any_raw += any(t.outcome != "inconclusive" for t in tests)
        adjust(tests)
        any_holm += any(t.outcome != "inconclusive" for t in tests)
    assert any_holm / reps <= _bound(0.05, reps) and any_raw / reps > 0.12


def test_holm_adjusts_step_down_and_decides_on_the_adjusted_value():
    from fgx.tables.stats import Paired, adjust, holm

    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.2]) == pytest.approx([0.5, 0.4]) and holm([]) == [] and holm([0.9, 0.3, 0.2]) == pytest.approx([0.9, 0.6, 0.6])
    tests = [Paired("holds", 5, 0.1, 0.01, 0.2, p=0.02), Paired("fails", 5, -0.1, -0.2, -0.05, p=0.001),
             Paired("inconclusive", 1, 0.1, float("-inf"), float("inf"), "one paired seed: no test")]
    adjust(tests)
    assert [(t.outcome, t.p_holm, t.m) for t in tests[:2]] == [("holds", pytest.approx(0.02), 2),
                                                                 ("fails", pytest.approx(0.002), 2)]
    assert tests[2].p_holm is None and tests[2].outcome == "inconclusive"     # untested: not in Holm's count
    more = [Paired("holds", 5, 0.1, 0.01, 0.2, p=0.03), Paired("holds", 5, 0.1, 0.01, 0.2, p=0.04)]
    adjust(more)
    assert [t.outcome for t in more] == ["inconclusive", "inconclusive"]
    assert more[0].reason == "not significant after Holm's adjustment over 2 orderings"
    assert "Holm p = 0.06 (of 2)" in more[0].describe()


def test_the_items_term_pairs_shared_seeds_and_bounds_the_rest():
    import numpy as np

    from fgx.tables.stats import NO_DATA, items_variance, shared_variance

    rng = np.random.default_rng(3)
    common = rng.normal(0, 0.02, 400)
    own = [rng.normal(0, 0.04, 400) for _ in range(4)]      # the part that differs by seed: in s_d², not here
    terms = [SeedTerm(common + o, "k") for o in own]
    v, df, how = items_variance(terms)
    assert v == pytest.approx(shared_variance(np.stack([t.reps for t in terms])))
    assert v == pytest.approx(0.02 ** 2, rel=0.3) and df == 399 and how.startswith("joint bootstrap")
    # each seed on its own items: their noise is in the seeds' spread, nothing is added
    assert items_variance([SeedTerm(common + o, f"k{i}") for i, o in enumerate(own)])[0] == 0.0
    # items without ids (no key): bounded as if shared, (Σ sd / n)²
    sd = np.std(common + own[0], ddof=1)
    assert items_variance([SeedTerm(common + own[0], None)] * 2)[0] == pytest.approx(sd ** 2)
    # an earlier record's standard errors: the same bound, from se_a + se_b per seed
    assert items_variance([SeedTerm(bound=0.02), SeedTerm(bound=0.04)]) == (pytest.approx(0.03 ** 2), float("inf"),
        "bound (Σ sd/n)² from the runs' standard errors (final round; no test-item replicates)")
    assert items_variance([SeedTerm(bound=0.02), None])[2] == NO_DATA and items_variance([])[2] == NO_DATA


def test_a_run_scores_its_replicates_as_the_simulation_does():
    """The simulation draws per-item means (ranking and regression runs); a classification run's accuracy
    replicates are the same draws, so the simulated rates stand for both."""
    import torch

    from fgx.metrics import bootstrap_item_means, bootstrap_replicates

    g = torch.Generator().manual_seed(5)
    n = 500
    y = torch.randint(0, 3, (n,), generator=g)
    scores = torch.randn(n, 3, generator=g)
    client, ids = torch.randint(0, 4, (n,), generator=g), torch.randint(0, 350, (n,), generator=g)
    correct = (scores.argmax(1) == y).double()
    a = bootstrap_replicates(scores, y, client, 4, 3, 0, ("accuracy",), items=ids)["accuracy"]
    b = bootstrap_item_means({"accuracy": correct}, client, 4, items=ids)["accuracy"]
    assert a == pytest.approx(b, abs=1e-6) and a.std() > 0


def test_a_run_resamples_its_distinct_items_once_however_many_clients_hold_them():
    """fgx/resampling.py: the summary block of a state whose two clients share items (an overlapping
    partition) counts distinct items and copies apart, draws each item once (its copies move together),
    and keys the split by the items' ids, so two runs on the same items pair and runs on others do not."""
    import numpy as np
    import torch

    from fgx.metrics import bootstrap_replicates, decode_replicates
    from fgx.resampling import StateItems

    g = torch.Generator().manual_seed(2)
    ids = [torch.arange(0, 60), torch.arange(30, 90)]              # items 30..59 in both clients
    labels = [torch.randint(0, 2, (60,), generator=g) for _ in ids]
    labels[1][:30] = labels[0][30:]                                  # one item, one label
    scores = [torch.randn(60, 2, generator=g) for _ in ids]
    kept = StateItems()
    per_client = [(s, y, i) for s, y, i in zip(scores, labels, ids)]
    kept.update({"test": {"items": per_client}}, True, [0, 1])
    out = kept.summary(2, 1, ("accuracy",))
    assert out["items"]["final"] == 90 and out["copies"]["final"] == 120 and out["reps"] == 200
    assert out["split"]["final"] == out["split"]["best"] == out["split"]["best_client"] is not None
    want = bootstrap_replicates(torch.cat(scores), torch.cat(labels), torch.tensor([0] * 60 + [1] * 60), 2, 2, 1,
                                ("accuracy",), items=torch.cat(ids))["accuracy"]
    assert decode_replicates(out["final"]["accuracy"]) == pytest.approx(want, abs=1e-3)
    # copies drawn as separate items would spread less: the shared items move both clients together
    apart = bootstrap_replicates(torch.cat(scores), torch.cat(labels), torch.tensor([0] * 60 + [1] * 60), 2, 2, 1,
                                 ("accuracy",))["accuracy"]
    assert not np.allclose(apart, want)
    other = StateItems()
    other.update({"test": {"items": [(s, y, i + 1000) for s, y, i in per_client]}}, True, [0, 1])
    assert other.summary(2, 1, ("accuracy",))["split"]["final"] != out["split"]["final"]
    assert StateItems().summary(2, 1, ("accuracy",)) is None


def test_an_ordering_of_rows_that_differ_in_two_keys_with_a_margin_is_the_shifted_paired_test():
    """`rows` selectors compare cells that differ in several keys (threat_cora: a robust rule under attack
    against the mean without one); `margin` m tests a ≥ b − m as the paired test of a + m against b, so
    its error rate is that of the plain test (simulated above) at the shifted gap."""
    from fgx.report.runs import Run
    from fgx.report.table import build_report
    from fgx.tables.checks import ordering_checks

    def run(threat, agg, seed, acc):
        return Run(Path(f"{threat}{agg}{seed}"), "completed", {"threat": threat, "aggregator": agg, "seed": str(seed)},
                   {"final": {"accuracy": acc}, "seed": seed, "main_metric": "accuracy",
                    "sampling_se": {"accuracy": 0.002}})

    # robust under attack is 0.03 below the clean mean on every seed, seeds spread
    runs = [run("none", "mean", s, 0.7 + 0.02 * s) for s in range(4)] + \
        [run("attack", "median", s, 0.67 + 0.02 * s + 0.001 * (s % 2)) for s in range(4)] + \
        [run("attack", "mean", s, 0.3) for s in range(4)]
    rep = build_report(runs, by=["threat", "aggregator"], metrics=["accuracy"])
    rows = [{"threat": "attack", "aggregator": "median"}, {"threat": "none", "aggregator": "mean"}]
    [plain] = ordering_checks(rep, {"rows": rows}, "accuracy")
    assert plain.outcome == "fails" and "Δ = -0.0295" in plain.fgx
    [within] = ordering_checks(rep, {"rows": rows, "margin": 0.05}, "accuracy")
    assert within.outcome == "holds" and "Δ = +0.0205" in within.fgx and within.paper.endswith("− 0.05")
    [short] = ordering_checks(rep, {"rows": rows, "margin": 0.01}, "accuracy")
    assert short.outcome == "fails"
    [missing] = ordering_checks(rep, {"rows": [rows[0], {"threat": "other", "aggregator": "mean"}]}, "accuracy")
    assert missing.outcome == "not run"
    # key/order/where as before
    [c] = ordering_checks(rep, {"key": "aggregator", "order": ["median", "mean"], "where": {"threat": "attack"}},
                          "accuracy")
    assert c.outcome == "holds"


def _scheme_run(n, scheme, seed, acc, auc=0.8, **summary):
    from fgx.report.runs import Run

    return Run(Path(f"{scheme}{n}_{seed}"), "completed", {"clients": str(n), "scheme": scheme, "seed": str(seed)},
               {"final": {"accuracy": acc, "roc_auc": auc}, "seed": seed, "main_metric": "accuracy", **summary})


def test_an_equality_holds_only_when_every_paired_seed_is_within_its_tolerance():
    """secagg_cost's check (conf/targets/secagg_cost.yaml): row a equals row b seed by seed. Gaps that cancel
    over the seeds (+0.01 on one, -0.01 on another: the means are equal) break it; a gap within the tolerance
    does not; each metric listed is compared, a row or seed missing is not run, a NaN in either row fails."""
    from fgx.report.table import build_report
    from fgx.tables.checks import equality_checks

    def check(runs, **e):
        rep = build_report(runs, by=["clients", "scheme"], metrics=["accuracy"])
        [c] = equality_checks(rep, {"key": "scheme", "pair": ["masked", "plain"], "where": {"clients": 10},
                                    "tolerance": 1e-6, **e}, "accuracy")
        return c

    plain = [_scheme_run(n, "plain", s, 0.5 + 0.1 * s) for n in (10, 100) for s in range(3)]
    close = [_scheme_run(10, "masked", s, 0.5 + 0.1 * s + 4e-7) for s in range(3)]
    c = check(plain + close)
    assert (c.outcome, c.kind) == ("holds", "equal") and c.ok is True
    assert c.what == "accuracy: masked = plain ± 1e-06 where clients=10" and c.paper == "masked = plain ± 1e-06"
    assert c.fgx.startswith("largest gap over 3 paired seed(s): accuracy 4e-07")
    cancelling = [_scheme_run(10, "masked", s, 0.5 + 0.1 * s + d) for s, d in zip(range(3), (0.01, -0.01, 0.0))]
    c = check(plain + cancelling)
    assert c.outcome == "fails" and c.ok is False and "(seed " in c.fgx and "accuracy 0.01" in c.fgx
    assert check(plain + cancelling, tolerance=0.02).outcome == "holds"
    # every listed metric: accuracy equal, roc_auc off on seed 2
    auc_off = [_scheme_run(10, "masked", s, 0.5 + 0.1 * s, auc=0.8 + (1e-3 if s == 2 else 0.0)) for s in range(3)]
    assert check(plain + auc_off).outcome == "holds"
    c = check(plain + auc_off, metrics=["accuracy", "roc_auc"])
    assert c.outcome == "fails" and c.fgx.endswith("(seed 2, roc_auc)") and c.what.startswith("accuracy, roc_auc:")
    nan = [_scheme_run(10, "masked", s, float("nan") if s == 1 else 0.5 + 0.1 * s) for s in range(3)]
    assert check(plain + nan).outcome == "fails"
    # undefined in both rows (ROC-AUC where every client's test split has one class) is no evidence of equality
    both_nan = [_scheme_run(10, m, s, 0.5, auc=float("nan")) for m in ("masked", "plain") for s in range(2)]
    c = check(both_nan, metrics=["accuracy", "roc_auc"])
    assert c.outcome == "fails" and "roc_auc nan" in c.fgx
    # the other scope (n=100) has no masked row; seeds the rows do not share
    assert check(plain + close, where={"clients": 100}).outcome == "not run"
    other_seeds = [_scheme_run(10, "masked", s, 0.5) for s in (7, 8)]
    c = check(plain + other_seeds)
    assert c.outcome == "not run" and "no seed both rows ran" in c.fgx
    # rows as selectors of several keys
    rep = build_report(plain + close, by=["clients", "scheme"], metrics=["accuracy"])
    [c] = equality_checks(rep, {"rows": [{"clients": 10, "scheme": "masked"}, {"clients": 10, "scheme": "plain"}],
                                "tolerance": 1e-6}, "accuracy")
    assert c.outcome == "holds" and c.paper == "(clients=10, scheme=masked) = (clients=10, scheme=plain) ± 1e-06"


def test_an_equality_that_holds_is_a_claim_the_table_reproduces_and_its_cost_columns_are_per_round():
    """A table whose only decided checks are equalities reads "reproduced" (a claim tested, as a paper value
    is); bytes and seconds per round are read from each run's summary (total_bytes and train_time_s over
    rounds) and shown with no check."""
    from fgx.tables.checks import table_from_runs

    cost = {"plain": (4e6, 1.0), "masked": (6e6, 3.0)}
    runs = [_scheme_run(10, m, s, 0.5 + 0.1 * s, rounds=2, total_bytes=b * 2 * (1 + 0.01 * s),
                        train_time_s=t * 2 + 0.2 * s) for m, (b, t) in cost.items() for s in range(2)]
    t = {"by": ["clients", "scheme"], "metric": "accuracy", "columns": ["MB_per_round", "s_per_round"],
         "equal": [{"key": "scheme", "pair": ["masked", "plain"], "tolerance": 1e-6}]}
    res = table_from_runs("t", t, runs)
    res.record = {}
    assert [c.kind for c in res.checks] == ["equal"] and res.status == "reproduced"
    row = {r["scheme"]: r for r in res.extra["table"]}
    assert row["masked"]["MB_per_round_mean"] == pytest.approx(6.03) and row["plain"]["MB_per_round_mean"] == pytest.approx(4.02)
    assert row["masked"]["s_per_round_mean"] == pytest.approx(3.05) and row["plain"]["s_per_round_std"] > 0
    assert "| MB_per_round | s_per_round |" in res.table_markdown and "6.03 ±" in res.table_markdown
    off = table_from_runs("t", {**t, "equal": [{**t["equal"][0], "pair": ["masked", "plain"], "where": {"clients": 10}}]},
                          [r for r in runs if r.overrides["scheme"] == "plain"])
    off.record = {}
    assert off.status == "incomplete"


def _divergence_table(n: int, a_values: dict, b_values: dict, order=("a", "b")):
    """An ordering of rows a and b over ``n`` seeds, lower better; a value None is a diverged run."""
    from fgx.report.runs import Run
    from fgx.tables.checks import table_from_runs

    def run(method, seed, v):
        s = {"status": "completed" if v is not None else "diverged", "main_metric": "mse", "seed": seed,
             "final": {"mse": 0.0 if v is None else v}, "sampling_se": {"mse": 0.001}}
        if v is None:
            s["diverged"] = {"round": 3, "loss": None, "reference": 1.0}
        return Run(Path(f"r/{method}{seed}"), s["status"], {"method": method, "seed": str(seed)}, s)

    t = {"paper": "P", "item": "I", "data": "d", "metric": "mse", "by": ["method"],
         "ordering": [{"key": "method", "order": list(order), "lower_is_better": True}]}
    runs = [run("a", s, a_values.get(s)) for s in range(n)] + [run("b", s, b_values.get(s)) for s in range(n)]
    res = table_from_runs("x", t, runs)
    (check,) = [c for c in res.checks if c.kind == "ordering"]
    # the table says how such an ordering was decided, only where one was
    assert any("exact two-sided sign test" in n for n in res.notes) == bool(check.test and check.test.n
                                                                          and check.test.data.endswith("sign test)"))
    return check


def test_an_ordering_against_a_row_that_diverged_on_every_seed_is_decided_by_an_exact_sign_test():
    """A diverged run lost its seed to a completed one: 10 seeds one way hold (p = 2/1024), the claimed-better
    row diverging fails, 5 seeds cannot decide (p = 1/16), and two rows that both diverged stay "diverged"."""
    done = {s: 0.5 + s / 100 for s in range(10)}
    held = _divergence_table(10, done, {})
    assert held.outcome == "holds" and held.test.n == 10 and held.test.p == pytest.approx(2 / 1024)
    assert "b diverged on every seed it ran" in held.fgx and "10 won by a, 0 by b" in held.fgx
    failed = _divergence_table(10, {}, done)
    assert failed.outcome == "fails" and "a diverged on every seed it ran" in failed.fgx
    five = _divergence_table(5, {s: 0.5 for s in range(5)}, {})
    assert five.outcome == "inconclusive" and five.test.p == pytest.approx(1 / 16) and "p ≥ 0.05" in five.fgx
    both = _divergence_table(4, {}, {})
    assert both.outcome == "diverged" and both.test is None
    # a seed where a diverged too is no win: 9 of 10 is p = 22/1024 (still holds); a row the record lacks is
    # still "not run", not a win
    nine = _divergence_table(10, {s: 0.5 for s in range(9)}, {})
    assert nine.test.n == 9 and nine.outcome == "holds"
    assert _divergence_table(4, {s: 0.5 for s in range(4)}, {}, order=("a", "z")).outcome == "not run"


def test_the_divergence_rule_decides_in_at_most_5_percent_of_tables_when_the_methods_are_exchangeable():
    """The sign test's error rate, measured: each seed's divergence drawn alike for both methods (a seed where
    only one diverges picks it by a fair coin), 10 seeds, 4,000 tables; then its power with a known gap
    (one method diverges on 90 % of seeds, the other on 10 %)."""
    import numpy as np

    from fgx.tables.stats import divergence_outcome

    rng = np.random.default_rng(0)

    def rate(p_a: float, p_b: float, tables: int = 4000) -> float:
        decided = 0
        for _ in range(tables):
            da, db = rng.random(10) < p_a, rng.random(10) < p_b
            seeds = [str(s) for s in range(10)]
            res = divergence_outcome({s for s, d in zip(seeds, da) if not d}, {s for s, d in zip(seeds, da) if d},
                                     {s for s, d in zip(seeds, db) if not d}, {s for s, d in zip(seeds, db) if d},
                                     "a", "b")
            decided += res.outcome in ("holds", "fails")
        return decided / tables

    assert rate(0.5, 0.5) <= 0.05
    assert rate(0.1, 0.9) >= 0.5
