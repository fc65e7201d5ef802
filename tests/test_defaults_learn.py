"""Defaults that learn (issue #66): every registered algorithm on one dataset of every family it declares,
at its defaults, learns (fgx/learns.py: above the trivial baseline by the stated margin, no divergence) or
refuses the family before any work with a reason. The committed record results/defaults_matrix.json is
written by `python scripts/defaults_matrix.py --record`; docs/defaults.md is rendered from it.
Slow: `python -m pytest -m slow tests/test_defaults_learn.py` reruns every case (about two hours on 2 cores)."""
from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
matrix = importlib.import_module("defaults_matrix")
sys.path.pop(0)


def _record() -> dict:
    return json.loads(matrix.RECORD.read_text())


def test_the_record_holds_every_algorithm_on_every_family_it_declares():
    want = {(c.algorithm, c.family.name) for c in matrix.cases()}
    got = {(e["algorithm"], e["family"]) for e in _record()["cases"]}
    assert want - got == set(), f"not recorded (python scripts/defaults_matrix.py --record --only NAME): {want - got}"
    assert got - want == set(), f"recorded but no longer a case: {got - want}"
    # a family per declared task; the matrix reads the registrations, so a new algorithm is a new case
    assert {f.task for f in matrix.FAMILIES} >= {"node", "edge", "graph", "ranking", "regression"}


def test_every_recorded_case_learns_or_refuses_with_a_reason():
    bad = []
    for e in _record()["cases"]:
        st = matrix.status(e)
        if st["status"] == "refuses":
            assert "not allowed; allowed:" in st["why"], st
        elif st["status"] != "learns":
            bad.append(f"{e['algorithm']} | {e['family']}: {st}")
    assert not bad, "\n".join(bad)


def test_the_page_is_the_rendering_of_the_record():
    assert (REPO / "docs" / "defaults.md").read_text() == matrix.render(_record())


def test_the_rule_judges_the_run_not_its_label():
    from fgx.learns import judge

    run = {"status": "completed", "main_metric": "accuracy", "final": {"accuracy": 0.70},
           "data": {"test_majority_rate": 0.64}}
    assert judge(run)["status"] == "learns" and judge(run)["threshold"] == pytest.approx(0.69)
    assert judge({**run, "final": {"accuracy": 0.68}})["status"] == "does not learn"
    assert judge({**run, "status": "diverged"})["status"] == "diverged"
    mse = {"status": "completed", "main_metric": "mse", "final": {"mse": 1.2}, "data": {"test_mean_mse": 1.35}}
    assert judge(mse)["status"] == "learns" and judge({**mse, "final": {"mse": 1.3}})["status"] == "does not learn"
    aml = {"status": "completed", "main_metric": "f1_minority", "final": {"f1_minority": 0.09},
           "data": {"test_majority_rate": 0.972}}
    assert judge(aml)["baseline"] == pytest.approx(2 * 0.028 / 1.028) and judge(aml)["status"] == "does not learn"
    assert judge({**run, "final": {"accuracy": float("nan")}})["status"] == "does not learn"


@pytest.mark.slow
@pytest.mark.parametrize("case", matrix.cases(), ids=lambda c: c.key.replace(" | ", "-").replace(" ", "_"))
def test_each_algorithm_learns_at_its_defaults_on_each_family_it_declares(case):
    entry = matrix.run_case(case)
    st = matrix.status(entry)
    assert st["status"] in ("learns", "refuses"), (case.key, st, entry.get("error"))
