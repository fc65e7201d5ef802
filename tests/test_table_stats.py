"""How a table decides: the paired-seed test of an ordering (fgx/tables/stats.py) and the checks and
notes built on it (fgx/tables/checks.py), as unit tests on made-up seeds and runs. Fast, so that
`scripts/mutation.sh fgx/tables/stats.py` and `fgx/tables/checks.py` can run them for every mutant;
the table jobs that exercise the same code end to end are in test_table_evidence.py and test_tables.py."""
from __future__ import annotations

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
