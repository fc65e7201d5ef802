"""eval_model: what a run scores (the global model, or each client's model after its local step)."""
from __future__ import annotations

import json

import pytest

from fgx.cli import main

LOCAL_STEP = ["algorithm.local_steps=3", "algorithm.lr=0.05", "model.dropout=0.0"]


def summary(d):
    return json.loads((d / "summary.json").read_text())


def test_local_scores_each_clients_stepped_model_not_the_global_one(run_fgx, tiny_cfg, monkeypatch):
    g = summary(run_fgx(*tiny_cfg, *LOCAL_STEP, "eval_model=global"))
    loc = summary(run_fgx(*tiny_cfg, *LOCAL_STEP, "eval_model=local"))
    assert g["eval_model"] == "global" and loc["eval_model"] == "local"
    # same training (evaluation draws no randomness), different models scored
    assert g["per_client"] != loc["per_client"]

    # the mechanism: scoring the global model under the local name gives back the global numbers
    from fgx.algorithms.fedavg import FedAvg
    monkeypatch.setattr(FedAvg, "local_model_for", FedAvg.model_for)
    same = summary(run_fgx(*tiny_cfg, *LOCAL_STEP, "eval_model=local"))
    assert same["per_client"] == g["per_client"]


def test_local_equals_global_where_clients_own_their_model(run_fgx, tiny_cfg):
    a = summary(run_fgx(*tiny_cfg, "algorithm=local", "eval_model=global"))
    b = summary(run_fgx(*tiny_cfg, "algorithm=local", "eval_model=local"))
    assert a["per_client"] == b["per_client"]


def test_local_is_refused_where_no_client_model_exists(run_fgx, tiny_cfg):
    with pytest.raises(SystemExit, match=r"eval_model='local' is not allowed.*ce_fedgnn"):
        run_fgx(*tiny_cfg, "algorithm=ce_fedgnn", "eval_model=local")


def test_resume_with_local_scoring_finishes_with_the_same_metrics(run_fgx, tiny_cfg, tmp_path):
    cfg = [*tiny_cfg, *LOCAL_STEP, "eval_model=local", "eval_every=2"]
    full = summary(run_fgx(*cfg, "rounds=4"))
    part = run_fgx(*cfg, "rounds=2")
    assert main(["run", *cfg, "rounds=4", "resume=true", f"hydra.run.dir={part}"]) == 0
    assert summary(part)["per_client"] == full["per_client"]


def test_metrics_option_computes_only_what_is_asked(run_fgx, tiny_cfg):
    full = summary(run_fgx(*tiny_cfg))
    acc = summary(run_fgx(*tiny_cfg, "metrics=[accuracy]", "main_metric=f1_macro"))
    assert set(acc["final"]) == {"accuracy", "f1_macro"}      # the main metric is always computed
    assert [c["accuracy"] for c in acc["per_client"]] == [c["accuracy"] for c in full["per_client"]]


def test_checkpoint_is_written_once_per_interval_and_after_the_last_round(run_fgx, tiny_cfg, monkeypatch):
    from fgx.outputs import RunDir

    saved = []
    real = RunDir.save_checkpoint
    monkeypatch.setattr(RunDir, "save_checkpoint", lambda self, state: saved.append(state["round"]) or real(self, state))
    run_fgx(*tiny_cfg, "rounds=4", "eval_every=1")                  # default interval: far longer than this run
    assert saved == [4]
    saved.clear()
    run_fgx(*tiny_cfg, "rounds=4", "eval_every=1", "output.checkpoint_every_s=0")
    assert saved == [1, 2, 3, 4]


def test_each_clients_evaluation_items_are_found_once_per_run(run_fgx, tiny_cfg, monkeypatch):
    """The items a client is scored on do not change between evaluations of the same view: they are
    looked up once, not at every round (a tenth of a Cora client's evaluation)."""
    import fgx.algorithms.base as base

    calls, real = [], base.eval_items
    monkeypatch.setattr(base, "eval_items", lambda view, task, splits, subset, seed, cid:
                        calls.append((cid, tuple(splits), subset)) or real(view, task, splits, subset, seed, cid))
    run_fgx(*tiny_cfg, "rounds=3", "eval_every=1")
    assert calls and len(calls) == len(set(calls)), calls


@pytest.mark.parametrize("algorithm", ["fedgta", "fediih"])
def test_local_scores_the_uploaded_weights_where_the_server_personalises_at_round_end(run_fgx, tiny_cfg,
                                                                                        monkeypatch, algorithm):
    """FedGTA and FedIIH replace each client's model with personalised weights at the end of a round: its
    model after the local step (what the FedGSP protocol scores) is the upload, kept for scoring."""
    from fgx.algorithms.base import UploadedLocalModels

    cfg = [*tiny_cfg, f"algorithm={algorithm}", "rounds=2"]
    g = summary(run_fgx(*cfg, "eval_model=global"))
    loc = summary(run_fgx(*cfg, "eval_model=local"))
    assert g["per_client"] != loc["per_client"]
    monkeypatch.setattr(UploadedLocalModels, "keep_uploads", lambda self, weights: None)   # uploads not kept
    assert summary(run_fgx(*cfg, "eval_model=local"))["per_client"] == g["per_client"]
