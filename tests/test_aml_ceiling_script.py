"""scripts/aml_ceiling.py: curves from run directories, a ceiling record per centralised run (its test scores
at its best validation F1) and whether its validation F1 had levelled off."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import aml_ceiling  # noqa: E402


def _run(root: Path, name: str, clients: int, val_f1: list[float]) -> Path:
    d = root / name
    (d / ".hydra").mkdir(parents=True)
    OmegaConf.save(OmegaConf.create({
        "rounds": len(val_f1), "partitioner": {"num_clients": clients}, "model": {"name": "gine"},
        "dataset": {"name": "aml", "preset": "hi_small", "scale": 0.1, "data_seed": 0},
        "algorithm": {"name": "local", "lr": 0.005, "optimizer": "adam", "local_steps": 100, "batch_size": 512,
                      "fanouts": [10, 10], "class_weights": [1.0, 6.275]}}), d / ".hydra" / "config.yaml")
    OmegaConf.save(OmegaConf.create(["dataset=aml_hi_small", "hydra.run.dir=x"]), d / ".hydra" / "overrides.yaml")
    rows = []
    for r, v in enumerate(val_f1, 1):
        for split, f1 in (("val", v), ("test", v / 2)):
            m = {"f1_minority": f1, "pr_auc": f1 / 3, "roc_auc": 0.9}
            rows.append(json.dumps({"round": r, "split": split, "mean": m, "pooled": m, "wall_time_s": 10.0 * r}))
    (d / "metrics.jsonl").write_text("\n".join(rows) + "\n")
    return d


def test_curves_and_the_ceiling_at_the_best_validation_round(tmp_path, capsys):
    rising = _run(tmp_path, "a", 1, [0.0, 0.1, 0.2, 0.3, 0.4])
    flat = _run(tmp_path, "b", 1, [0.1, 0.3, 0.29, 0.3, 0.31])
    fed = _run(tmp_path, "c", 4, [0.0, 0.05])
    out = tmp_path / "out"
    aml_ceiling.main(["--run", f"rising={rising}", "--run", f"flat={flat}", "--run", f"fed={fed}", "--out", str(out)])
    curves = json.loads((out / "curves.json").read_text())["curves"]
    assert [c["label"] for c in curves] == ["rising", "flat", "fed"]
    assert curves[2]["points"][1]["items_seen"] == 2 * 100 * 4 * 512
    assert curves[0]["command"] == "fgx run dataset=aml_hi_small" and curves[0]["status"] == "not finished"
    assert curves[0]["setting"].endswith("class weights [1.0, 6.275]")      # nothing stratified or dropped
    recs = json.loads((out / "ceiling.json").read_text())["records"]
    assert len(recs) == 2                                   # the federated run is no ceiling
    assert recs[0]["steps"] == 500 and recs[0]["test"]["f1_minority"] == pytest.approx(0.2) and not recs[0]["plateau"]
    assert recs[1]["steps"] == 500 and recs[1]["plateau"]   # no gain above 0.02 in its last three evaluations
    assert (out / "curves.png").stat().st_size > 0


def test_append_adds_a_run_to_recorded_curves_whose_directories_are_gone(tmp_path):
    import shutil

    out = tmp_path / "out"
    old = _run(tmp_path, "a", 1, [0.0, 0.1, 0.2])
    aml_ceiling.main(["--run", f"old={old}", "--run", f"fed={_run(tmp_path, 'b', 4, [0.0, 0.05])}", "--out", str(out)])
    shutil.rmtree(old)
    aml_ceiling.main(["--append", "--run", f"new={_run(tmp_path, 'c', 1, [0.1, 0.3, 0.2])}", "--out", str(out)])
    curves = json.loads((out / "curves.json").read_text())["curves"]
    assert [c["label"] for c in curves] == ["old", "fed", "new"]
    recs = json.loads((out / "ceiling.json").read_text())["records"]
    assert [r["test"]["f1_minority"] for r in recs] == pytest.approx([0.1, 0.15])   # both centralised runs
    # the same label again replaces its curve; without --append only the runs named are kept
    aml_ceiling.main(["--append", "--run", f"new={_run(tmp_path, 'd', 1, [0.4])}", "--out", str(out)])
    assert [c["label"] for c in json.loads((out / "curves.json").read_text())["curves"]] == ["old", "fed", "new"]
    assert json.loads((out / "ceiling.json").read_text())["records"][1]["test"]["f1_minority"] == pytest.approx(0.2)
    aml_ceiling.main(["--run", f"only={tmp_path / 'd'}", "--out", str(out)])
    assert [c["label"] for c in json.loads((out / "curves.json").read_text())["curves"]] == ["only"]


def test_the_setting_names_stratified_batches_and_dropped_edge_features(tmp_path):
    d = _run(tmp_path, "a", 1, [0.1, 0.2])
    cfg = OmegaConf.load(d / ".hydra" / "config.yaml")
    cfg.algorithm.positive_share, cfg.dataset.ports, cfg.dataset.timestamp_feature = 0.1, False, False
    OmegaConf.save(cfg, d / ".hydra" / "config.yaml")
    assert aml_ceiling.read_run("a", d)["setting"].endswith(
        "class weights [1.0, 6.275], stratified batches q = 0.1, no ports feature, no timestamp_feature feature")
