"""How a table decides: the paired-seed test of an ordering (fgx/tables/stats.py) and the checks and
notes built on it (fgx/tables/checks.py), as unit tests on made-up seeds and runs. Fast, so that
`scripts/mutation.sh fgx/tables/stats.py` and `fgx/tables/checks.py` can run them for every mutant;
the table jobs that exercise the same code end to end are in test_table_evidence.py and test_tables.py."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from fgx.tables.stats import paired_outcome


def test_a_gap_inside_seed_noise_is_inconclusive_and_a_reversed_one_fails():
    a = {0: 0.84, 1: 0.80, 2: 0.86, 3: 0.79, 4: 0.85}
    noisy = {0: 0.83, 1: 0.82, 2: 0.84, 3: 0.81, 4: 0.83}          # mean gap 0.002, differences of both signs
    assert paired_outcome(a, noisy).outcome == "inconclusive"
    better = {s: v + 0.03 + 0.001 * s for s, v in a.items()}
    assert paired_outcome(better, a).outcome == "holds"
    p = paired_outcome(a, better)                                   # the claim a >= better, reversed
    assert p.outcome == "fails" and p.high < 0 < -p.low
    # lower is better: the claim is about the smaller value
    assert paired_outcome(a, better, lower_is_better=True).outcome == "holds"
    # one paired seed, or none: no test
    assert paired_outcome({0: 0.9}, {0: 0.1}).outcome == "inconclusive"
    assert paired_outcome({0: 0.9}, {1: 0.1}).outcome == "inconclusive"
    # a consistent gap below the test split's sampling error decides nothing
    assert paired_outcome(better, a, sampling_error=0.05).outcome == "inconclusive"
    assert paired_outcome(better, a, sampling_error=0.01).outcome == "holds"


def test_rows_equal_on_every_seed_are_inconclusive_and_say_why():
    # equality satisfies ">=" literally but is no evidence for a paper's ordering; the reason names it
    a = {0: 1.0, 1: 1.0, 2: 1.0}
    p = paired_outcome(a, dict(a))
    assert p.outcome == "inconclusive" and p.reason == "equal on every seed" and p.low == p.high == 0.0
    # a constant non-zero difference is a point interval and decides
    assert paired_outcome({s: v + 0.01 for s, v in a.items()}, a).outcome == "holds"
    # equal on two seeds of three is not "equal on every seed"
    q = paired_outcome({0: 1.0, 1: 1.0, 2: 0.9}, a)
    assert q.reason != "equal on every seed"


def test_the_interval_is_the_paired_t_interval():
    from scipy import stats

    a = {0: 0.70, 1: 0.74, 2: 0.71, 3: 0.69}
    b = {0: 0.66, 1: 0.73, 2: 0.69, 3: 0.64}
    p = paired_outcome(a, b)
    r = stats.ttest_rel([a[s] for s in a], [b[s] for s in b])
    low, high = r.confidence_interval(0.95)
    assert p.low == pytest.approx(low) and p.high == pytest.approx(high) and p.n == 4


def test_an_ordering_check_pairs_seeds_and_uses_the_runs_sampling_error():
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
    assert c.outcome == "inconclusive" and "sampling error" in c.fgx


def _entry(row: str, seed: int, acc: float, gain: float | None = None) -> dict:
    s = {"final": {"accuracy": acc}, "best": {"round": 3, "val": acc, "test": {"accuracy": acc}}}
    return {"overrides": {"method": row, "seed": str(seed)}, "summary": s,
            "progress": {"gain_last_10pct": gain} if gain is not None else {}}


def test_a_row_equal_to_another_on_every_seed_is_named_and_one_that_differs_once_is_not():
    from fgx.tables.checks import equal_rows_notes

    sweep = {"method": "fedavg,gcfl,fedprox", "seed": "0,1,2"}
    runs = [_entry(m, s, 0.5 + 0.01 * s) for m in ("fedavg", "gcfl") for s in range(3)]
    runs += [_entry("fedprox", s, 0.5 + 0.01 * s + (0.001 if s == 2 else 0.0)) for s in range(3)]
    notes = equal_rows_notes({"runs": runs}, sweep)
    assert len(notes) == 1 and "method=fedavg equals method=gcfl" in notes[0] and "3 shared seeds" in notes[0]
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


def _record(p) -> tuple:
    return p.outcome, p.n, p.mean, p.low, p.high, p.reason


def test_every_outcome_carries_its_seeds_gap_interval_and_reason():
    """What a table prints is the Paired record (Δ, interval, n, reason): each branch's whole record."""
    import math

    from scipy import stats

    none = paired_outcome({0: 0.9}, {1: 0.1})
    assert (none.outcome, none.n, none.reason) == ("inconclusive", 0, "no seed run by both")
    assert all(math.isnan(x) for x in (none.mean, none.low, none.high))
    one = paired_outcome({0: 0.9, 1: 0.5}, {0: 0.1})
    assert _record(one) == ("inconclusive", 1, pytest.approx(0.8), -math.inf, math.inf, "one paired seed: no test")

    def t_interval(d):
        m, sd = sum(d) / len(d), stats.tstd(d)
        half = stats.t.ppf(0.975, len(d) - 1) * sd / math.sqrt(len(d))
        return pytest.approx(m), pytest.approx(m - half), pytest.approx(m + half)

    a = {0: 0.70, 1: 0.74, 2: 0.71, 3: 0.69}
    b = {0: 0.66, 1: 0.73, 2: 0.69, 3: 0.64}
    d = [a[s] - b[s] for s in a]
    assert _record(paired_outcome(a, b)) == ("holds", 4, *t_interval(d), "")
    assert _record(paired_outcome(b, a)) == ("fails", 4, *t_interval([-x for x in d]), "")
    mixed = {0: 0.72, 1: 0.70, 2: 0.73, 3: 0.66}
    dm = [a[s] - mixed[s] for s in a]
    assert _record(paired_outcome(a, mixed)) == ("inconclusive", 4, *t_interval(dm), "the interval contains 0")
    assert _record(paired_outcome(a, b, sampling_error=0.05)) == (
        "inconclusive", 4, *t_interval(d), "|Δ| below the test split's sampling error (0.0500)")
    assert _record(paired_outcome(a, dict(a))) == ("inconclusive", 4, 0.0, 0.0, 0.0, "equal on every seed")


def test_the_lower_is_better_gap_is_oriented_toward_the_claim():
    a = {0: 0.20, 1: 0.25, 2: 0.22}
    worse = {0: 0.30, 1: 0.36, 2: 0.31}                   # higher, so worse when lower is better
    p = paired_outcome(a, worse, lower_is_better=True)
    assert p.outcome == "holds" and p.mean == pytest.approx(0.1)
    q = paired_outcome(worse, a, lower_is_better=True)
    assert q.outcome == "fails" and q.mean == pytest.approx(-0.1)


def test_two_paired_seeds_are_enough_to_decide():
    # n - 1 = 1 degree of freedom: a wide t quantile (12.7), but a tight enough gap still decides
    p = paired_outcome({0: 0.6, 1: 0.7001}, {0: 0.5, 1: 0.6})
    assert p.outcome == "holds" and p.n == 2 and p.low > 0


def test_a_gap_equal_to_the_sampling_error_is_not_below_it():
    a, b = {0: 0.75, 1: 0.5}, {0: 0.5, 1: 0.25}           # every seed's gap is 0.25 exactly
    assert paired_outcome(a, b, sampling_error=0.25).outcome == "holds"
    assert paired_outcome(a, b, sampling_error=0.2500001).outcome == "inconclusive"


def test_differences_with_unit_spread_are_an_interval_not_a_point():
    # gaps 1, 2, 3: standard deviation exactly 1; the interval is 2 ± 4.30/sqrt(3), so it contains 0
    p = paired_outcome({0: 1.0, 1: 2.0, 2: 3.0}, {0: 0.0, 1: 0.0, 2: 0.0})
    assert p.outcome == "inconclusive" and p.low < 0 < p.high


def test_describe_says_the_gap_the_interval_the_seeds_and_why():
    assert paired_outcome({0: 0.9}, {1: 0.1}).describe() == "no paired seeds"
    assert paired_outcome({0: 0.9}, {0: 0.1}).describe() == \
        "Δ = +0.8000, 95% CI no interval, n = 1; one paired seed: no test"
    a, b = {0: 0.75, 1: 0.5}, {0: 0.5, 1: 0.25}
    assert paired_outcome(a, b).describe() == "Δ = +0.2500, 95% CI [+0.2500, +0.2500], n = 2"
    assert paired_outcome(b, a).describe() == "Δ = -0.2500, 95% CI [-0.2500, -0.2500], n = 2"
    assert paired_outcome(a, dict(a)).describe() == \
        "Δ = +0.0000, 95% CI [+0.0000, +0.0000], n = 2; equal on every seed"


# -- fgx/tables/checks.py: a table's checks and its status, from made-up runs -----------------------
def _run(method, seed, acc, se=None, majority=None, status="completed", metric="accuracy"):
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


def test_paper_values_hold_within_their_tolerance_and_a_missing_row_fails():
    from fgx.tables.checks import compare

    rep = _report([_run("x", s, 0.80 + 0.01 * s) for s in range(3)] + [_run("y", s, 0.70) for s in range(3)])
    t = {"rows": [{"where": {"method": "x"}, "paper": 0.82, "tolerance": 0.02},     # mean 0.81: within
                  {"where": {"method": "y"}, "paper": 0.75, "tolerance": 0.02},     # 0.70: outside
                  {"where": {"method": "y"}, "paper": 0.75},                        # no tolerance: shown
                  {"where": {"method": "z"}, "paper": 0.5, "tolerance": 0.1}]}      # no such row
    checks = compare(rep, t, "accuracy")
    assert _outcomes(checks) == [("accuracy of method=x (|Δ| ≤ 0.02)", "holds"),
                                 ("accuracy of method=y (|Δ| ≤ 0.02)", "fails"),
                                 ("accuracy of method=y", "shown"), ("accuracy of method=z", "fails")]
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
    assert c.outcome == "fails" and c.fgx == "missing ['w']" and c.paper == "x ≥ w"
    [c] = ordering_checks(_report(runs), {"key": "method", "order": ["y", "x"], "lower_is_better": True}, "accuracy")
    assert c.outcome == "holds" and c.what == "accuracy: y ≤ x" and c.paper == "y ≤ x"
    # a scope: only the groups with that value take part
    scoped = [Run(Path(f"{m}{h}{s}"), "completed", {"method": m, "hidden": str(h), "seed": str(s)},
                  {"final": {"accuracy": acc + 0.001 * s}, "seed": s, "main_metric": "accuracy"})
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


def test_the_sampling_error_is_the_mean_over_the_compared_rows_completed_runs():
    from fgx.tables.checks import base_metric, sampling_error

    runs = [_run("x", 0, 0.8, se=0.01), _run("x", 1, 0.8, se=0.03), _run("y", 0, 0.7, se=0.02),
            _run("z", 0, 0.7, se=0.5), _run("y", 1, 0.7, se=0.9, status="failed")]
    assert sampling_error(runs, [{"method": "x"}, {"method": "y"}], ["method"], "accuracy") == pytest.approx(0.02)
    assert sampling_error(runs, [{"method": "x"}], ["method"], "best_client_accuracy") == pytest.approx(0.02)
    assert sampling_error([_run("x", 0, 0.8)], [{"method": "x"}], ["method"], "accuracy") is None
    assert base_metric("best_client_accuracy") == "accuracy" and base_metric("best_f1") == "f1"
    assert base_metric("accuracy") == "accuracy"


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
    p = paired_outcome({0: 0.9, "1": 0.8, 2: 0.85}, {0: 0.5, "1": 0.4, 2: 0.45})
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

    three = [{}, {}, {}]
    c = tuned({"a": {"trials": three, "hinge": {}}, "b": {"trials": three, "hinge": {}, "at_edge": ["algorithm.lr"]}})
    assert c.ok and c.fgx == ("every row tuned by `fgx tune t` (3 trials each; hinge keys ['algorithm.mu']); "
                              "chosen at a grid edge: b algorithm.lr")
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
    both = {"a": {"trials": three, "hinge": {}}, "b": {"trials": three, "hinge": {}}}
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
                   {"final": {"accuracy": acc + 0.001 * s, "f1": f1 + 0.001 * s}, "seed": s, "main_metric": "accuracy"})

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
        ("accuracy of method=w", False, "fails"), ("accuracy of method=x (|Δ| ≤ 0.099)", True, "holds"),
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
    assert c.what == "ordering of accuracy by method where method=x" and c.paper == "x ≤ w" and c.ok is False


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
    from fgx.tables.checks import equal_rows_notes

    sweep = {"method": "a,b,c"}
    runs = [_entry(m, s, 0.5 + 0.01 * s) for m in ("a", "b") for s in range(2)] + [_entry("c", 0, 0.9)]
    notes = equal_rows_notes({"runs": runs}, sweep)
    assert notes == ["method=a equals method=b in every number on all 2 shared seeds: its mechanism never acted "
                     "in this protocol, so the row is b relabelled."]
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
    from fgx.tables.checks import equal_rows_notes, floor_checks

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
                                                                                  "at_edge": ["lr", "mu"]} for m in "ab"}}))
    c = _effort(conf, "t", rec, {"effort": "tuned"}, {}, sweep)
    assert c.ok and c.fgx == ("every row tuned by `fgx tune t` (1 trials each); chosen at a grid edge: "
                              "a lr, a mu, b lr, b mu")
    (tmp_path / "results" / "t.tune.json").write_text(json.dumps({"methods": {m: {"trials": [{}]} for m in "ab"}}))
    assert _effort(conf, "t", rec, {"effort": "tuned"}, {}, sweep).fgx == "every row tuned by `fgx tune t` (1 trials each)"
    (tmp_path / "results" / "t.tune.json").write_text("{}")
    assert _effort(conf, "t", rec, {"effort": "tuned"}, {}, sweep).fgx == "declared tuned; not tuned by `fgx tune t`: a, b"
    # values tuned on another configuration of the same data: said so
    c = _effort(conf, "u", rec, {"effort": "tuned"}, {}, sweep, tuned_from="t")
    assert c.ok is False and "fgx tune t" in c.fgx
    (tmp_path / "results" / "t.tune.json").write_text(json.dumps({"methods": {m: {"trials": [{}]} for m in "ab"}}))
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
    from fgx.tables.checks import equal_rows_notes

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
    assert res.checks == []
