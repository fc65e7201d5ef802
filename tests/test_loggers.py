"""logger=tensorboard | mlflow: every evaluation's metrics streamed to local files."""
from __future__ import annotations

import json

import pytest

from fgx.cli import main


def _test_rows(run_dir):
    rows = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["round"]: r["mean"]["accuracy"] for r in rows if r["split"] == "test"}


@pytest.mark.slow   # optional integrations (tensorboard, mlflow extras): ~30 s each loaded
def test_tensorboard_events_match_metrics(run_fgx, tiny_cfg):
    pytest.importorskip("tensorboard", reason="tensorboard is not installed (pip install -e '.[tensorboard]')")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = run_fgx(*tiny_cfg, "logger=tensorboard")
    ea = EventAccumulator(str(run / "tensorboard"))
    ea.Reload()
    got = {e.step: e.value for e in ea.Scalars("test/accuracy")}
    want = _test_rows(run)
    assert set(got) == set(want) == {1, 2, 3}
    assert all(got[k] == pytest.approx(want[k], abs=1e-6) for k in want)
    assert "val/accuracy" in ea.Tags()["scalars"]


@pytest.mark.slow
def test_mlflow_local_store_matches_metrics(run_fgx, tiny_cfg):
    pytest.importorskip("mlflow", reason="mlflow is not installed (pip install -e '.[mlflow]')")
    from mlflow.tracking import MlflowClient

    run = run_fgx(*tiny_cfg, "logger=mlflow", "experiment_name=tiny")
    client = MlflowClient(tracking_uri=(run / "mlruns").resolve().as_uri())
    exp = client.get_experiment_by_name("tiny")
    (r,) = client.search_runs([exp.experiment_id])
    assert r.info.status == "FINISHED" and r.data.params["algorithm.name"] == "fedavg"
    hist = {m.step: m.value for m in client.get_metric_history(r.info.run_id, "test/accuracy")}
    want = _test_rows(run)
    assert all(hist[k] == pytest.approx(want[k], abs=1e-6) for k in want)


def test_missing_logger_package_is_a_config_error(tmp_path, monkeypatch, tiny_cfg, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "mlflow" else real(n, *a))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["run", *tiny_cfg, "logger=mlflow", f"hydra.run.dir={tmp_path / 'r'}"])
    assert "logger='mlflow'" in str(e.value) and "pip install 'fgx[mlflow]'" in str(e.value)
    assert not (tmp_path / "r").exists()
