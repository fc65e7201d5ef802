"""End-to-end runs through the CLI: run directory contents, determinism, sweeps, resume."""
import json

import pytest
import torch

from fgx.cli import main


def read_jsonl(p):
    return [json.loads(x) for x in p.read_text().splitlines() if x.strip()]


def test_run_writes_a_complete_run_directory(run_fgx, tiny_cfg):
    d = run_fgx(*tiny_cfg)
    for f in ("summary.json", "metrics.jsonl", "comm.json", "privacy.json", "partition.json", "fgx.log",
              "checkpoint.pt", ".hydra/config.yaml", ".hydra/overrides.yaml"):
        assert (d / f).exists(), f
    s = json.loads((d / "summary.json").read_text())
    assert s["status"] == "completed" and s["main_metric"] == "accuracy"
    assert 0 <= s["final"]["accuracy"] <= 1 and len(s["per_client"]) == 3
    assert s["data"] == {**s["data"], "name": "csbm", "source": "generated"}
    assert s["best"]["round"] in (1, 2, 3) and s["peak_rss_mb"] > 0 and s["wall_time_s"] > 0
    rows = read_jsonl(d / "metrics.jsonl")
    assert [(r["round"], r["split"]) for r in rows] == [(r, s) for r in (1, 2, 3) for s in ("val", "test")]
    assert len(rows[0]["per_client"]) == 3 and "accuracy" in rows[0]["mean"]
    comm = json.loads((d / "comm.json").read_text())
    assert set(comm["per_round"]["1"]) == {"global_weights", "update"}
    assert comm["total_bytes"] == sum(sum(v.values()) for v in comm["per_round"].values())
    assert json.loads((d / "privacy.json").read_text())["mechanism"] == "none"


def test_evaluation_scores_the_configured_splits_and_a_fixed_subset_until_the_final_one(run_fgx, tiny_cfg):
    """eval.splits adds train; eval.subset: intermediate evaluations score the same random items each
    time, the final evaluation scores every item, and summary.json says which was which."""
    from fgx.metrics import classification_metrics

    d = run_fgx(*tiny_cfg, "eval.splits=[train,val,test]", "eval.subset=7", "rounds=3")
    rows = read_jsonl(d / "metrics.jsonl")
    assert [r["split"] for r in rows if r["round"] == 1] == ["train", "val", "test"]
    s = json.loads((d / "summary.json").read_text())
    assert s["evaluation"]["final"].startswith("complete") and "7 items" in s["evaluation"]["intermediate"]
    full = run_fgx(*tiny_cfg, "rounds=3")
    last = [r for r in read_jsonl(full / "metrics.jsonl") if r["round"] == 3]
    assert [r["mean"] for r in last] == [r["mean"] for r in rows if r["round"] == 3 and r["split"] != "train"]
    early = [r for r in rows if r["round"] < 3 and r["split"] == "test"]
    assert early and all(r["per_client"] != x["per_client"] for r, x in
                         zip(early, [y for y in read_jsonl(full / "metrics.jsonl") if y["round"] < 3 and
                                     y["split"] == "test"]))
    # the subset is fixed: the same 7 items per split and client at every intermediate evaluation
    from fgx.algorithms.base import eval_items
    from types import SimpleNamespace
    view = SimpleNamespace(val_mask=torch.arange(50) % 2 == 0, y=torch.arange(50))
    a = eval_items(view, "node", ["val"], 7, seed=0, cid=1)["val"][0]
    assert a.numel() == 7 and torch.equal(a, eval_items(view, "node", ["val"], 7, seed=0, cid=1)["val"][0])
    assert not torch.equal(a, eval_items(view, "node", ["val"], 7, seed=0, cid=2)["val"][0])
    assert bool((a % 2 == 0).all())


def test_best_client_is_each_clients_test_at_its_own_best_validation_round(run_fgx, tiny_cfg):
    d = run_fgx(*tiny_cfg, "rounds=4")
    s = json.loads((d / "summary.json").read_text())
    rows = read_jsonl(d / "metrics.jsonl")
    val = {r["round"]: r["per_client"] for r in rows if r["split"] == "val"}
    test = {r["round"]: r["per_client"] for r in rows if r["split"] == "test"}
    picked = []
    for i in range(3):
        best_round = max(sorted(val), key=lambda r: val[r][i]["accuracy"])   # max keeps the first of ties
        picked.append(test[best_round][i]["accuracy"])
    assert s["best_client"]["rounds"] == [max(sorted(val), key=lambda r: val[r][i]["accuracy"]) for i in range(3)]
    assert s["best_client"]["test"]["accuracy"] == pytest.approx(sum(picked) / 3)
    from fgx.report.runs import metric_values
    assert metric_values(s)["best_client_accuracy"] == pytest.approx(sum(picked) / 3)


def test_fedavg_update_bytes_match_model_size(run_fgx, tiny_cfg):
    d = run_fgx(*tiny_cfg)
    comm = json.loads((d / "comm.json").read_text())
    # gcn 16 -> 16 -> 16, then a linear classifier 16 -> 5: weights + biases, float32; 3 clients up and 3 down
    n_params = 2 * (16 * 16 + 16) + 16 * 5 + 5
    assert comm["per_round"]["1"] == {"global_weights": 3 * 4 * n_params, "update": 3 * 4 * n_params}


def test_same_config_and_seed_give_identical_metrics(run_fgx, tiny_cfg):
    a = read_jsonl(run_fgx(*tiny_cfg) / "metrics.jsonl")
    b = read_jsonl(run_fgx(*tiny_cfg) / "metrics.jsonl")
    strip = lambda rows: [{k: v for k, v in r.items() if k not in ("wall_time_s", "round_time_s")} for r in rows]
    assert strip(a) == strip(b)
    c = read_jsonl(run_fgx(*tiny_cfg, "seed=1") / "metrics.jsonl")
    assert strip(a) != strip(c)


@pytest.mark.parametrize("algo", ["local", "fedavg"])
@pytest.mark.parametrize("model", ["gcn", "sage", "gin"])
def test_algorithms_and_models_run(run_fgx, tiny_cfg, algo, model):
    d = run_fgx(*tiny_cfg, f"algorithm={algo}", f"model={model}", "rounds=2")
    s = json.loads((d / "summary.json").read_text())
    assert s["status"] == "completed"
    if algo == "local":
        assert json.loads((d / "comm.json").read_text())["total_bytes"] == 0


def test_multirun_leaves_one_complete_directory_per_job(tmp_path, monkeypatch, tiny_cfg):
    monkeypatch.chdir(tmp_path)
    sweep = tmp_path / "sweep"
    rc = main(["run", "-m", *tiny_cfg, "algorithm=local,fedavg", "seed=0,1", "rounds=2",
               f"hydra.sweep.dir={sweep}"])
    assert rc == 0
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir() and p.name.isdigit())
    assert len(jobs) == 4
    combos = set()
    for j in jobs:
        s = json.loads((j / "summary.json").read_text())
        assert s["status"] == "completed"
        combos.add((s["components"]["algorithm"], s["seed"]))
    assert combos == {("local", 0), ("local", 1), ("fedavg", 0), ("fedavg", 1)}


def test_sweep_with_a_bad_value_fails_before_any_job(tmp_path, monkeypatch, tiny_cfg):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match="partitioner.num_clients"):
        main(["run", "-m", *tiny_cfg, "partitioner.num_clients=2,-1", f"hydra.sweep.dir={tmp_path / 's'}"])
    assert not (tmp_path / "s").exists()


def test_runtime_failure_marks_the_run_failed(run_fgx, tiny_cfg, monkeypatch):
    """A run that breaks during training keeps its directory, marked failed, with the error and traceback
    (an input problem found before round 1 leaves none: tests/test_early_checks.py)."""
    from fgx.algorithms.fedavg import FedAvg

    def broken(self, r):
        raise RuntimeError("boom in round 1")

    monkeypatch.setattr(FedAvg, "round", broken)
    d = run_fgx(*tiny_cfg, expect_rc=1)
    s = json.loads((d / "summary.json").read_text())
    assert s["status"] == "failed" and "boom in round 1" in s["error"] and "Traceback" in s["traceback"]


def test_resume_finishes_with_the_same_metrics(run_fgx, tiny_cfg, tmp_path):
    full = read_jsonl(run_fgx(*tiny_cfg, "rounds=4", "eval_every=2") / "metrics.jsonl")
    # an interrupted run: only the first 2 rounds happened (its checkpoint is at round 2)
    part = run_fgx(*tiny_cfg, "rounds=2", "eval_every=2")
    rc = main(["run", *tiny_cfg, "rounds=4", "eval_every=2", "resume=true", f"hydra.run.dir={part}"])
    assert rc == 0
    resumed = read_jsonl(part / "metrics.jsonl")
    strip = lambda rows: [(r["round"], r["split"], r["mean"]) for r in rows]
    assert strip(resumed) == strip(full)
    summary = lambda d: json.loads((d / "summary.json").read_text())
    assert summary(part)["best_client"] == summary(run_fgx(*tiny_cfg, "rounds=4", "eval_every=2"))["best_client"]


def test_cora_real_files_load_offline(run_fgx, data_root):
    d = run_fgx("dataset=cora", f"data_dir={data_root}", "partitioner=metis", "partitioner.num_clients=4",
                "rounds=2", "eval_every=2")
    s = json.loads((d / "summary.json").read_text())
    assert s["data"]["name"] == "cora" and s["data"]["source"] == "real"
    part = json.loads((d / "partition.json").read_text())
    assert sum(c["nodes"] for c in part["clients"]) == 2708


@pytest.mark.slow
def test_cora_louvain_fedavg_reaches_075(run_fgx, data_root):
    d = run_fgx("dataset=cora", f"data_dir={data_root}", "partitioner=louvain", "partitioner.num_clients=10",
                "algorithm=fedavg", "model=gcn")
    s = json.loads((d / "summary.json").read_text())
    assert s["final"]["accuracy"] >= 0.75


@pytest.mark.parametrize("extra", [
    [],
    ["dataset=aml_tiny", "partitioner=by_bank", "partitioner.num_clients=2", "model=gine", "model.hidden=8"],
])
def test_minibatches_from_the_sampler(run_fgx, tiny_cfg, extra):
    base = tiny_cfg if not extra else ["rounds=2", "eval_every=2"]
    d = run_fgx(*base, *extra, "rounds=2", "eval_every=2", "algorithm.batch_size=32",
                "algorithm.fanouts=[5,5]", "algorithm.local_steps=2")
    assert json.loads((d / "summary.json").read_text())["status"] == "completed"
