"""`fgx data generate|stats` and an end-to-end `fgx run` on the tiny AML preset."""
from __future__ import annotations

import json

import pytest

from fgx.cli import main


def test_generate_writes_csv_and_is_cached(tmp_path, capsys):
    out = tmp_path / "gen"
    assert main(["data", "generate", "aml_tiny", "--scale", "0.25", "--seed", "2", "--out", str(out)]) == 0
    assert "written" in capsys.readouterr().out
    first = (out / "Trans.csv").read_bytes()
    assert abs(len(first.splitlines()) - 1 - 5_000) <= 20   # the last laundering pattern may overshoot
    assert main(["data", "generate", "tiny", "--scale", "0.25", "--seed", "2", "--out", str(out)]) == 0
    assert "already there" in capsys.readouterr().out
    assert main(["data", "generate", "huge", "--out", str(out)]) == 2


def test_stats_reports_table3_columns(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FGX_DATA_DIR", str(tmp_path))
    assert main(["data", "stats", "aml_tiny", "dataset.scale=0.5", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert abs(s["edges"] - 10_000) <= 20 and s["clients"] == 4 and s["source"] == "generated"
    assert s["ls_ratio"] >= 1.0 and 0 < s["share_crossing_banks"]["laundering"] <= 1
    pat = s["patterns"]
    per = pat["per_typology"]
    assert pat["source"] == "Patterns.csv" and pat["in_no_pattern"] == 0      # the generator plants every one
    assert sum(v["transactions"] for v in per.values()) == pat["in_patterns"] == s["laundering_edges"]
    assert sum(v["patterns"] for v in per.values()) == pat["patterns"] > 0
    assert sum(v["over_one_day"] for v in per.values()) == pat["patterns_over_one_day"] <= pat["patterns"]
    assert set(per) <= {"fan_out", "fan_in", "cycle", "scatter_gather", "gather_scatter", "bipartite", "stack", "random"}
    assert main(["data", "stats", "aml_tiny", "dataset.scale=0.5"]) == 0
    assert "patterns: per_typology: " in capsys.readouterr().out
    with pytest.raises(SystemExit, match="not an AML dataset"):
        main(["data", "stats", "karate"])


def test_fgx_run_fedavg_gine_on_aml_tiny(run_fgx, tmp_path, monkeypatch):
    monkeypatch.setenv("FGX_DATA_DIR", str(tmp_path / "data"))
    run = run_fgx("dataset=aml_tiny", "dataset.scale=0.25", "partitioner=by_bank", "model=gine",
                  "model.hidden=16", "algorithm=fedavg", "rounds=2", "eval_every=1")
    s = json.loads((run / "summary.json").read_text())
    assert s["status"] == "completed" and s["main_metric"] == "f1_minority"
    assert s["data"]["source"] == "generated" and s["data"]["preset"] == "tiny"
    assert s["partition"]["num_clients"] == 4 and s["partition"]["ls_ratio"] >= 1.0
