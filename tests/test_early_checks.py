"""Checks that need only the config run before any work (no data loaded, no run directory); a problem
that shows only once the data are loaded leaves no run directory that looks like a run."""
from __future__ import annotations

import json

import pytest


@pytest.fixture
def no_work(monkeypatch, tmp_path):
    """fgx run in tmp_path with the trainer and every dataset loader booby-trapped: a check that
    passes them has happened before any work."""
    import fgx.trainer
    from fgx.registry import DATASETS

    monkeypatch.chdir(tmp_path)

    def trap(*a, **k):
        raise AssertionError("work started before the config was refused")

    monkeypatch.setattr(fgx.trainer, "run", trap)
    for name in DATASETS.names():
        monkeypatch.setattr(DATASETS.get(name), "obj", trap)
    return tmp_path


def _refused(args: list[str]) -> str:
    from fgx.cli import main

    with pytest.raises(SystemExit) as e:
        main(["run", *args])
    return str(e.value.code)


def test_device_cuda_without_cuda_is_refused_before_any_work(no_work, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    msg = _refused(["device=cuda"])
    assert "device='cuda'" in msg and "no CUDA device" in msg
    assert not (no_work / "outputs").exists()


@pytest.mark.parametrize("args, key", [
    (["algorithm=fedgcn", "dataset=cora", "data_dir=/nonexistent"], "dataset.features_public"),
    (["algorithm=swift_fedgnn", "dataset=cora", "algorithm.remote_layer0=aggregate"], "dataset.features_public"),
    (["algorithm=ce_fedgnn", "dataset=cora", "algorithm.remote_layer0=raw"], "algorithm.remote_layer0"),
    (["algorithm=gcfl", "dataset=csbm", "algorithm.client_fraction=0.5"], "algorithm.client_fraction"),
    (["algorithm=fedpub", "dataset=csbm", "algorithm.batch_size=32"], "algorithm.batch_size"),
    (["algorithm=fedgta", "dataset=csbm", "algorithm.batch_size=32"], "algorithm.batch_size"),
    (["dataset=cora", "partitioner=by_community"], "partitioner.name"),
])
def test_config_only_checks_run_before_the_data_are_loaded(no_work, args, key):
    assert key in _refused(args)
    assert not (no_work / "outputs").exists()


def test_public_features_let_fedgcn_through_the_early_check():
    from fgx.cli import compose
    from fgx.config import validate

    validate(compose(["algorithm=fedgcn", "dataset=cora", "dataset.features_public=true"]))
    validate(compose(["algorithm=fedgcn", "dataset=cora", "algorithm.hops=0"]))


def test_a_problem_found_after_loading_leaves_no_run_directory(tmp_path, monkeypatch, capsys):
    """Louvain without its size cap leaves a client of csbm seed 2 without training nodes: found after
    the partition, so a single run stops, says why, and removes the directory it had started."""
    from fgx.cli import main

    monkeypatch.chdir(tmp_path)
    tiny = ["dataset=csbm", "seed=2", "partitioner.delta=null", "algorithm=fedavg", "rounds=1"]
    assert main(["run", *tiny]) == 2
    err = capsys.readouterr().err
    assert "hold no training nodes" in err and "no run directory was kept" in err
    assert [p for p in (tmp_path / "outputs").rglob("*")] == []
    # in a sweep the job stays, marked failed, so that `fgx report` lists it
    assert main(["run", "-m", *tiny]) == 1
    summaries = list((tmp_path / "outputs" / "multirun").rglob("summary.json"))
    assert len(summaries) == 1 and json.loads(summaries[0].read_text())["status"] == "failed"


def test_a_reused_run_directory_is_never_removed(tmp_path, monkeypatch):
    from fgx.cli import main

    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "mine"
    run_dir.mkdir()
    (run_dir / "notes.txt").write_text("my own file")
    main(["run", "dataset=csbm", "seed=2", "partitioner.delta=null", "algorithm=fedavg", "rounds=1",
          f"hydra.run.dir={run_dir}"])
    assert (run_dir / "notes.txt").read_text() == "my own file"
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "failed"
