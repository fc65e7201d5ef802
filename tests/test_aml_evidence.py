"""The generated AML patterns need the graph: GINe beats an MLP on the edge features alone by at
least 0.1 minority-class F1 on aml_tiny (centralised: one client). A few minutes on 2 cores."""
from __future__ import annotations

import json

import pytest

COMMON = ["dataset=aml_tiny", "partitioner=by_bank", "partitioner.num_clients=1", "algorithm=local",
          "rounds=40", "eval_every=10", "algorithm.lr=0.005"]


@pytest.mark.slow
def test_gine_beats_edge_feature_mlp(run_fgx, tmp_path, monkeypatch):
    monkeypatch.setenv("FGX_DATA_DIR", str(tmp_path / "data"))
    f1 = {}
    for model in ("gine", "mlp_edge"):
        run = run_fgx(*COMMON, f"model={model}")
        f1[model] = json.loads((run / "summary.json").read_text())["final"]["f1_minority"]
    assert f1["gine"] >= f1["mlp_edge"] + 0.1, f1
