"""Scaling (#11): executor=ray gives the in-process metrics, Hydra launchers run sweeps in
parallel processes, device handling. docs/scaling.md."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from fgx.cli import main



def installed(module: str) -> bool:
    """Whether ``module`` can be imported; a submodule of a package that is absent too (hydra_plugins.*
    without any Hydra plugin installed: find_spec raises instead of answering None)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


HAS_RAY = installed("ray")
HAS_JOBLIB_LAUNCHER = installed("hydra_plugins.hydra_joblib_launcher")


def summary(run_dir) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


# the command (#23): Cora, 4 Louvain clients, FedAvg, 5 rounds, seed 1, default dropout
CORA_FEDAVG = ["dataset=cora", "partitioner=louvain", "partitioner.num_clients=4", "algorithm=fedavg", "rounds=5",
               "seed=1", "output.checkpoint=false"]


@pytest.mark.skipif(not HAS_RAY, reason="ray is not installed (pip install -e '.[ray]')")
def test_ray_executor_gives_the_in_process_metrics(run_fgx, data_root):
    import torch
    import yaml

    cfg = [*CORA_FEDAVG, f"data_dir={data_root}"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)      # the actors run torch with 1 thread: compare at equal thread counts
    try:
        local_run = run_fgx(*cfg)
        ray_run = run_fgx(*cfg, "executor=ray", "executor.num_cpus=2")
    finally:
        torch.set_num_threads(threads)
    assert yaml.safe_load((local_run / ".hydra" / "config.yaml").read_text())["model"]["dropout"] > 0
    local, remote = summary(local_run), summary(ray_run)
    assert remote["status"] == "completed" and remote["components"]["executor"] == "ray"
    for key in ("final", "final_pooled", "per_client", "best", "best_client", "total_bytes"):
        assert remote[key] == local[key], key
    losses = [[r["train_loss"] for r in map(json.loads, (d / "metrics.jsonl").read_text().splitlines())]
              for d in (local_run, ray_run)]
    assert losses[1] == losses[0]


def test_client_randomness_depends_on_seed_round_and_client_only():
    """Every client call sees global RNGs seeded by (seed, round, call, client), whatever ran before
    it in the process, and leaves the caller's RNG where it was."""
    import random

    import numpy as np
    import torch

    from fgx.federation.executor import InProcessExecutor

    class C:
        def __init__(self, cid):
            self.cid = cid

    def draws(c):
        return (torch.rand(3).tolist(), float(np.random.rand()), random.random(),
                torch.nn.functional.dropout(torch.ones(8), 0.5).tolist())

    def run(order, burn, r=1):
        ex = InProcessExecutor()
        ex.start_round(seed=7, r=r)
        torch.manual_seed(burn)
        np.random.seed(burn)
        before = torch.get_rng_state()
        out = ex.map(draws, [C(i) for i in order])
        assert torch.equal(torch.get_rng_state(), before)       # the server's stream is untouched
        second = ex.map(draws, [C(i) for i in order])          # the round's next call: new streams
        return {c: (a, b) for c, a, b in zip(order, out, second)}

    base = run([0, 1, 2], burn=0)
    assert run([2, 0, 1], burn=123) == base                     # order and prior draws do not matter
    assert len({str(v[0]) for v in base.values()}) == 3          # clients differ
    assert all(a != b for a, b in base.values())                 # calls within a round differ
    assert run([0, 1, 2], burn=0, r=2) != base                   # rounds differ


def test_client_state_is_shipped_without_its_resident_data():
    from dataclasses import dataclass, field

    from fgx.federation.client import ClientState
    from fgx.federation.ray_executor import RayExecutor, attach, strip
    import torch

    @dataclass
    class Cached(ClientState):            # a method's client with a dict field ('a.b' paths name its keys)
        cache: dict = field(default_factory=dict)

    view = object()
    state = Cached(cid=3, view=view, model=torch.nn.Linear(2, 2), optimizer=None, task="node", sampler="S",
                   cache={"big": "B", "keep": 1})
    paths = ["view", "sampler", "cache.big"]
    light = strip(state, paths)
    assert light.view is None and light.sampler is None and light.cache == {"keep": 1} and light.model is state.model
    assert state.view is view and state.sampler == "S" and state.cache["big"] == "B"   # the original is untouched
    attach(light, {"view": view, "sampler": "S", "cache.big": "B"})
    assert light.view is view and light.sampler == "S" and light.cache["big"] == "B"
    # what the actor sends back replaces the algorithm's own state, but not its resident data
    back = strip(light, paths)
    back.model = torch.nn.Linear(2, 2)
    RayExecutor._update(state, back, paths)
    assert state.model is back.model and state.view is view and state.sampler == "S"
    assert state.cache == {"big": "B", "keep": 1}


@pytest.mark.skipif(not HAS_RAY, reason="ray is not installed (pip install -e '.[ray]')")
def test_ray_config_errors_name_the_key(tiny_cfg):
    from fgx.cli import prevalidate

    with pytest.raises(SystemExit, match="executor.num_cpus"):
        prevalidate([*tiny_cfg, "executor=ray", "executor.address=auto", "executor.num_cpus=2"], False)
    with pytest.raises(SystemExit, match="executor.gpus_per_actor"):
        prevalidate([*tiny_cfg, "executor=ray", "executor.gpus_per_actor=1"], False)


def test_without_ray_the_ray_executor_is_a_config_error_saying_how_to_install_it(tiny_cfg, monkeypatch):
    from fgx.cli import prevalidate

    # without Ray installed: a config error that says how to install it, before any work
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    with pytest.raises(SystemExit, match=r"pip install -e '\.\[ray\]'"):
        prevalidate([*tiny_cfg, "executor=ray"], False)


@pytest.mark.skipif(not HAS_JOBLIB_LAUNCHER, reason="hydra-joblib-launcher is not installed (pip install -e '.[joblib]')")
def test_joblib_launcher_runs_a_sweep_in_worker_processes_and_reports_failures(tmp_path, monkeypatch, tiny_cfg):
    monkeypatch.chdir(tmp_path)
    sweep = tmp_path / "sweep"
    # 400 clients on 300 nodes passes validation but fails in its worker: the parent must notice
    rc = main(["run", "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", *tiny_cfg, "rounds=1",
               "partitioner.num_clients=3,400", f"hydra.sweep.dir={sweep}"])
    assert rc == 1
    status = {d.name: summary(d)["status"] for d in sweep.iterdir() if d.is_dir()}
    assert status == {"0": "completed", "1": "failed"}
    assert "hydra_joblib_launcher" in (sweep / "0" / ".hydra" / "hydra.yaml").read_text()


def test_device_auto_and_cuda_resolution():
    import torch

    from fgx.config import ConfigError
    from fgx.trainer import resolve_device

    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="device"):
            resolve_device("cuda")


DEVICE_PATH = ["dataset=csbm", "dataset.num_nodes=240", "dataset.num_features=8", "partitioner=random",
               "partitioner.num_clients=3", "rounds=2", "eval_every=1", "model.hidden=8"]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not __import__("torch").cuda.is_available(), reason="no CUDA device"))])
@pytest.mark.parametrize("setup", [
    [*DEVICE_PATH, "algorithm=fedavg", "privacy=dp_fedavg", "algorithm.weighting=uniform", "algorithm.batch_size=16",
     "algorithm.fanouts=[5,5]"],
    [*DEVICE_PATH, "algorithm=ce_fedgnn", "privacy=metric_dp", "privacy.public_messages=[update,grad_estimator]"],
    [*DEVICE_PATH, "algorithm=certified_lr", "unlearning=scalegun", "rounds=1", "unlearning.requests.num_requests=2",
     "unlearning.requests.batch_size=2"],
    # the server's collaboration graphs stay on the CPU while the client models are on the device
    ["dataset=hetero_homophily", "dataset.num_communities=5", "dataset.nodes_per_community=40",
     "dataset.num_features=8", "partitioner=by_community", "model=unifilter", "model.K=3", "model.hidden=8",
     "algorithm=fedgsp", "algorithm.k_principal=2", "rounds=2", "eval_every=1"],
    # all node models as one tensor, correlated noise drawn on the CPU
    ["dataset=diabetes", "partitioner=topology", "partitioner.graph=florentine", "model=mlp_tabular",
     "model.hidden=8", "algorithm=mafalda_sgd", "privacy=mf_gdp", "algorithm.k=2", "algorithm.b=2", "rounds=4",
     "eval_every=4"],
], ids=["fedavg_dp_sampler", "ce_fedgnn_metric_dp", "certified_lr_scalegun", "fedgsp", "mafalda_sgd"])
def test_device_end_to_end(run_fgx, device, setup):
    """The same path on every device: models, fgx's sampler, privacy noise, unlearning, server-side
    state. scripts/check_device.py runs every algorithm this way on a GPU machine."""
    run = run_fgx(*setup, f"device={device}")
    s = summary(run)
    assert s["status"] == "completed", s.get("error")
    if "unlearning=scalegun" in setup:
        assert len(json.loads((run / "unlearning.json").read_text())["requests"]) == 2
    assert all(v == v for v in s["final"].values() if v is not None)


HAS_OPTUNA_SWEEPER = installed("hydra_plugins.hydra_optuna_sweeper")


@pytest.mark.skipif(not HAS_OPTUNA_SWEEPER, reason="hydra-optuna-sweeper is not installed (pip install -e '.[optuna]')")
def test_optuna_objective_is_the_runs_validation_metric(tmp_path, monkeypatch, tiny_cfg):
    import yaml

    monkeypatch.chdir(tmp_path)
    sweep = tmp_path / "sweep"
    rc = main(["run", "-m", "hydra/sweeper=optuna", "hydra.sweeper.n_trials=2", "hydra.sweeper.direction=maximize",
               "hydra.sweeper.sampler.seed=0", *tiny_cfg, "rounds=2", "algorithm.lr=interval(0.001, 0.1)",
               f"hydra.sweep.dir={sweep}"])
    assert rc == 0
    result = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    runs = [summary(d) for d in sweep.iterdir() if (d / "summary.json").exists()]
    assert len(runs) == 2 and len({r["best"]["val"] for r in runs} | {None}) >= 2
    best = max(runs, key=lambda r: r["best"]["val"])
    assert result["best_value"] == pytest.approx(best["best"]["val"])
    overrides = (Path(best["run_dir"]) / ".hydra" / "overrides.yaml").read_text()
    assert f"algorithm.lr={result['best_params']['algorithm.lr']}" in overrides


def test_every_algorithm_has_a_case_in_the_device_check():
    """scripts/check_device.py is how fgx's GPU path is checked; an algorithm added without a case there
    (the graph-level methods were, for a while) would never run on a GPU before a user's does."""
    path = Path(__file__).resolve().parents[1] / "scripts" / "check_device.py"
    spec = importlib.util.spec_from_file_location("check_device", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.uncovered_algorithms() == set()
    labels = [label for label, _, _ in mod.CASES]
    assert len(labels) == len(set(labels))          # one row per case in the merged --table
