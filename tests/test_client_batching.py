"""executor=batched (#41): the clients' local steps as one block-diagonal batch with stacked per-client
parameters give every client the update, model, optimiser state and loss its own loop gives
(executor=local), and no client's update depends on another client's data."""
from __future__ import annotations

import json

import pytest
import torch

from fgx.config import ConfigError

BASE = ["dataset=csbm", "dataset.num_nodes=400", "dataset.num_features=16", "partitioner=metis",
        "partitioner.num_clients=5", "model.hidden=16", "output.progress=off", "output.checkpoint=false"]


def build(tmp_path, *overrides: str):
    from fgx.cli import compose
    from fgx.config import validate
    from fgx.outputs import RunDir
    from fgx import trainer

    out = tmp_path / f"job{len(list(tmp_path.iterdir()))}"
    out.mkdir()
    return trainer._build(validate(compose([*BASE, *overrides])), RunDir(out))


def step(job, r: int) -> dict:
    job.executor.start_round(job.v.top.seed, r)
    return job.algo.round(r)


def max_diff(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


CASES = [
    ("fedavg", "gcn", []),
    ("fedavg", "sage", ["algorithm.batch_size=16", "algorithm.class_weighted=true"]),
    # clients take different numbers of steps (local_epochs over their own sizes) in different rounds (sampling)
    ("fedavg", "gcn", ["algorithm.local_epochs=1", "algorithm.batch_size=12", "algorithm.client_fraction=0.6"]),
    ("fedavg", "gcn", ["algorithm.optimizer=sgd", "algorithm.lr=0.2", "model.classifier=none",
                       "model.input_dropout=true"]),
    ("fedprox", "gcn", ["algorithm.mu=0.5"]),
    ("fedprox", "sage", ["algorithm.mu=0.5"]),
    ("fedper", "gcn", []),
    ("fedper", "sage", []),
    ("local", "gcn", []),
    ("local", "sage", []),
    ("fedavg", "gcn", ["privacy=dp_fedavg", "algorithm.weighting=uniform", "privacy.clip=0.05", "privacy.noise_multiplier=0.5"]),
]


@pytest.mark.parametrize("algorithm,model,extra", CASES)
def test_batched_clients_equal_the_per_client_loop(tmp_path, algorithm, model, extra):
    cfg = [f"algorithm={algorithm}", f"model={model}", *extra]
    loop = build(tmp_path, *cfg, "executor=local")
    # all 5 clients (~80 nodes each) in one batch, or in groups of one or two (of similar size)
    group = 100_000 if CASES.index((algorithm, model, extra)) % 2 else 170
    batched = build(tmp_path, *cfg, "executor=batched", "executor.client_batching=on", f"executor.group_nodes={group}")
    assert loop.v.params["model"].dropout > 0          # every client's dropout masks are its own loop's
    for r in (1, 2, 3):
        a, b = step(loop, r), step(batched, r)
        assert b["loss"] == pytest.approx(a["loss"], abs=1e-5, nan_ok=True)
        if algorithm != "local":       # each client's upload, as the server received it (after the mechanism)
            ca, da = loop.algo.received
            cb, db = batched.algo.received
            assert [s.cid for s in ca] == [s.cid for s in cb] and len(da) >= 2
            for ua, ub in zip(da, db):
                assert ua.keys() == ub.keys() and max_diff(ua, ub) < 1e-5
        for sa, sb in zip(loop.algo.states, batched.algo.states):
            assert max_diff(sa.model.state_dict(), sb.model.state_dict()) < 1e-5
            oa, ob = sa.optimizer.state_dict()["state"], sb.optimizer.state_dict()["state"]
            assert oa.keys() == ob.keys()
            for k in oa:
                assert max_diff(oa[k], ob[k]) < 1e-5 and float(oa[k].get("step", 0)) == float(ob[k].get("step", 0))
    assert loop.channel.report() == batched.channel.report()      # one upload per client, same kinds and bytes
    ea, eb = loop.evaluator(loop.algo), batched.evaluator(batched.algo)
    for split in ea:
        for ma, mb in zip(ea[split]["per_client"], eb[split]["per_client"]):
            assert mb == pytest.approx(ma, abs=1e-5, nan_ok=True)


def test_a_clients_update_does_not_depend_on_another_clients_data(tmp_path):
    """Client 0's features and labels changed: its update changes, every other client's stays as it was
    (a parameter shared between rows, an edge across blocks, a loss or dropout draw mixed between clients
    would move them)."""
    def updates(change: bool):
        job = build(tmp_path, "algorithm=fedavg", "executor=batched", "executor.client_batching=on")
        if change:
            v = job.algo.states[0].view
            g = torch.Generator().manual_seed(1)
            v.x = torch.randn(v.x.shape, generator=g) * 3
            v.y = torch.randint(0, int(v.y.max()) + 1, v.y.shape, generator=g)
        step(job, 1)     # round 1: every client starts from the same global weights
        return job.algo.received[1]

    same, changed = updates(False), updates(True)
    assert max_diff(same[0], changed[0]) > 1e-3
    for a, b in zip(same[1:], changed[1:]):
        assert max_diff(a, b) < 1e-6


def test_batched_path_trains_as_one_computation(tmp_path, monkeypatch):
    """With client_batching on, the per-client loop is not run: the round is the batched form."""
    from fgx.federation import executor as ex

    job = build(tmp_path, "algorithm=fedavg", "executor=batched", "executor.client_batching=on")
    monkeypatch.setattr(ex, "run_seeded", lambda *a: pytest.fail("a client ran on its own"))
    step(job, 1)


def test_auto_runs_what_it_cannot_batch_one_client_after_another(tmp_path):
    """client_batching=auto with sampled steps (algorithm.fanouts) and with an algorithm without a batched
    form: executor=local's loop, the same numbers exactly."""
    for cfg in (["algorithm=fedavg", "algorithm.batch_size=16", "algorithm.fanouts=[5,5]"], ["algorithm=moon"]):
        loop = build(tmp_path, *cfg, "executor=local")
        auto = build(tmp_path, *cfg, "executor=batched")
        assert step(auto, 1)["loss"] == step(loop, 1)["loss"]


@pytest.mark.parametrize("extra,why", [
    (["algorithm=scaffold"], "algorithm 'scaffold'"),
    (["algorithm=fedavg", "model=gin"], "model 'gin'"),
    (["algorithm=fedavg", "algorithm.batch_size=16", "algorithm.fanouts=[5,5]"], "fanouts"),
])
def test_client_batching_on_refuses_what_it_cannot_batch_before_work(extra, why):
    from fgx.cli import compose
    from fgx.config import validate

    with pytest.raises(ConfigError, match=f"executor.client_batching.*{why}"):
        validate(compose([*BASE, *extra, "executor=batched", "executor.client_batching=on"]))


def test_fgx_run_with_batched_clients(run_fgx):
    cfg = [*BASE, "algorithm=fedavg", "rounds=3", "eval_every=1"]
    loop, batched = run_fgx(*cfg), run_fgx(*cfg, "executor=batched")
    a, b = (json.loads((d / "summary.json").read_text()) for d in (loop, batched))
    assert b["components"]["executor"] == "batched"
    assert b["final"] == pytest.approx(a["final"], abs=1e-5) and b["total_bytes"] == a["total_bytes"]


def test_batched_run_resumes_with_the_same_metrics(run_fgx, tmp_path):
    """The clients' optimiser states the batched step writes back are what a checkpoint keeps and a
    resumed run's batched step reads again (Adam's moments and step counts per client)."""
    from fgx.cli import main

    cfg = [*BASE, "algorithm=fedavg", "executor=batched", "eval_every=2", "output.checkpoint=true",
           "output.checkpoint_every_s=0"]
    rows = lambda d: [(r["round"], r["split"], r["mean"], r["train_loss"])
                      for r in map(json.loads, (d / "metrics.jsonl").read_text().splitlines())]
    full = rows(run_fgx(*cfg, "rounds=4"))
    part = run_fgx(*cfg, "rounds=2")
    assert main(["run", *cfg, "rounds=4", "resume=true", f"hydra.run.dir={part}"]) == 0
    assert rows(part) == full
