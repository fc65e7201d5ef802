"""CE-FedGNN under executor=batched (issue 69): the clients' sampled local steps stepped together in groups
(fgx/algorithms/ce_fedgnn_batched.py) give runs equal bit for bit to the per-client loop (executor=local):
every per-client metric of every round, the training loss, and every byte and message of comm.json."""
from __future__ import annotations

import json

import pytest

from fgx.algorithms import ce_fedgnn, ce_fedgnn_batched

# 6 METIS clients of about 100 nodes; group_nodes=250: groups of two clients, so a step stacks several
SMALL = ["algorithm=ce_fedgnn", "dataset=csbm", "dataset.num_nodes=600", "dataset.num_features=16",
         "partitioner=metis", "partitioner.num_clients=6", "model.hidden=16", "rounds=2", "eval_every=1",
         "algorithm.local_steps=3", "algorithm.batch_size=24", "output.progress=off", "output.checkpoint=false"]
BATCHED = ["executor=batched", "executor.group_nodes=250"]


def outputs(d) -> tuple[list, dict]:
    rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
    for r in rows:
        r.pop("round_time_s", None)
        r.pop("wall_time_s", None)
    return rows, json.loads((d / "comm.json").read_text())


def counting(monkeypatch) -> dict:
    """Count the per-client loop's calls and the batched groups (each group's clients)."""
    seen = {"loop": 0, "groups": []}
    loop, group = ce_fedgnn.local_round, ce_fedgnn_batched._group_round

    def local_round(c, *a):
        seen["loop"] += 1
        return loop(c, *a)

    def group_round(cs, *a):
        seen["groups"].append(len(cs))
        return group(cs, *a)

    monkeypatch.setattr(ce_fedgnn, "local_round", local_round)
    monkeypatch.setattr(ce_fedgnn_batched, "_group_round", group_round)
    return seen


@pytest.mark.parametrize("extra", [
    [],
    # the other branches of Eq. 5 / Eq. 9 and the model without a classifier head
    ["algorithm.embedding_sharing=stale", "algorithm.grad_through_ma=scaled", "algorithm.ma_init=zeros",
     "algorithm.grad_init=first", "algorithm.weight_decay=0.01", "model.classifier=none"],
    ["algorithm.embedding_sharing=none", "+algorithm.share_grad_estimator=false", "algorithm.gamma=0.3",
     "algorithm.beta=0.7", "algorithm.batch_size=100"],
], ids=["defaults", "stale_scaled_zeros_first_wd_nohead", "none_local_G_fullbatch"])
def test_batched_clients_give_the_loops_run_bit_for_bit(run_fgx, monkeypatch, extra):
    seen = counting(monkeypatch)
    loop = outputs(run_fgx(*SMALL, *extra, "executor=local"))
    assert seen["loop"] == 12 and not seen["groups"]          # 6 clients x 2 rounds, one by one
    seen["loop"] = 0
    batched = outputs(run_fgx(*SMALL, *extra, *BATCHED))
    assert seen["loop"] == 0 and sum(seen["groups"]) == 12 and max(seen["groups"]) >= 2
    assert batched[0] == loop[0]           # metrics and losses, every client, every round
    assert batched[1] == loop[1]           # bytes and message counts per kind and round
    assert loop[1]["totals"].get("embeddings", 0) > 0 or "embedding_sharing=none" in " ".join(extra)


def test_configs_without_a_batched_form_run_the_loop(run_fgx, monkeypatch):
    seen = counting(monkeypatch)
    run_fgx(*SMALL, *BATCHED, "algorithm.local_optimizer=adam_on_g")
    assert seen["loop"] == 12 and not seen["groups"]
    assert ce_fedgnn_batched.refusal([], type("P", (), {"fanouts": None, "batch_size": 8})) is not None
