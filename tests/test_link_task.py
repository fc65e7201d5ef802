"""Task ``link`` (docs/link_prediction.md): the run on Cora offline, the metrics against OGB's evaluator,
the negative-sampling and message-passing mechanism inside a run, the methods that learn on it and the
ones it refuses, the cross-client policies and the temporal split."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

CORA = ["task=link", "dataset=cora", "partitioner.num_clients=5", "rounds=2", "eval_every=2", "output.progress=off"]


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def test_link_on_cora_runs_offline_and_reports_auc_hits_mrr(run_fgx, data_root):
    s = summary(run_fgx(*CORA, "algorithm=fedavg", f"data_dir={data_root}"))
    assert s["status"] == "completed" and s["data"]["task"] == "link" and s["main_metric"] == "roc_auc"
    assert set(s["final"]) == {"roc_auc", "mrr", "hits@10", "hits@50"} and set(s["final_pooled"]) == set(s["final"])
    assert set(s["sampling_se"]) == set(s["final"]) and all(v > 0 for v in s["sampling_se"].values())
    assert s["data"]["link_source_task"] == "node" and s["data"]["link_cross_client"] == "exclude"
    part = json.loads((Path(s["run_dir"]) / "partition.json").read_text())
    assert all(c["link_train_positives"] > 0 and c["link_test_positives"] > 0 for c in part["clients"])


# -- metrics: OGB's evaluator on the same scores ---------------------------------------------------------

def test_hits_and_mrr_equal_ogb_evaluator_on_the_same_scores():
    pytest.importorskip("ogb")
    from ogb.linkproppred import Evaluator
    from sklearn.metrics import roc_auc_score

    from fgx.link.metrics import link_metrics

    g = torch.Generator().manual_seed(0)
    for trial in range(5):
        k, m = 40 + 7 * trial, 25
        pos = torch.randn(k, generator=g) + 1.0
        neg = torch.randn(k, m, generator=g)
        if trial % 2:      # ties between positives and negatives, and among negatives
            pos, neg = pos.round(), neg.round()
        ours = link_metrics(pos, neg, [1, 10, 50, 100])
        hits = Evaluator("ogbl-collab")
        for K in (1, 10, 50, 100):
            hits.K = K
            want = hits.eval({"y_pred_pos": pos, "y_pred_neg": neg.reshape(-1)})[f"hits@{K}"]
            assert ours[f"hits@{K}"] == pytest.approx(want, abs=1e-12), (trial, K)
        mrr = Evaluator("ogbl-citation2").eval({"y_pred_pos": pos, "y_pred_neg": neg})["mrr_list"].mean().item()
        assert ours["mrr"] == pytest.approx(mrr, abs=1e-6), trial
        y = torch.cat([torch.ones(k), torch.zeros(k * m)])
        assert ours["roc_auc"] == pytest.approx(roc_auc_score(y, torch.cat([pos, neg.reshape(-1)])), abs=1e-12)
    small = link_metrics(torch.tensor([0.5]), torch.tensor([[0.1, 0.9]]), [10])    # fewer negatives than K: OGB's 1
    assert small["hits@10"] == 1.0 and small["mrr"] == 0.5
    diverged = link_metrics(torch.tensor([float("nan"), 1.0]), torch.zeros(2, 3), [10])   # not MRR 1 and AUC 0
    assert all(v != v for v in diverged.values())


@pytest.mark.parametrize("ties, limit", [(False, 4096), (True, 4096), (True, 0)])
def test_the_bootstrap_scores_each_resample_as_link_metrics_does(ties, limit, monkeypatch):
    """resampled_metrics weighs positives by how often a resample draws them; each resample's values must
    equal link_metrics on that resample written out (positives repeated with their rows of negatives)."""
    import fgx.link.evaluate as ev
    from fgx.link.evaluate import resampled_metrics
    from fgx.link.metrics import link_metrics

    monkeypatch.setattr(ev, "PAIRWISE_LIMIT", limit)       # 0: the one-resample-at-a-time ROC-AUC

    g = torch.Generator().manual_seed(1)
    pos, neg = torch.randn(30, generator=g).double() + 0.8, torch.randn(30, 7, generator=g).double()
    if ties:
        pos, neg = (pos * 2).round(), (neg * 2).round()
    idx = torch.randint(30, (12, 30), generator=g)
    weights = torch.zeros(12, 30, dtype=torch.double).scatter_add_(1, idx, torch.ones(12, 30, dtype=torch.double))
    got = resampled_metrics(pos, neg, weights, [1, 5, 50])
    for r in range(12):
        want = link_metrics(pos[idx[r]], neg[idx[r]], [1, 5, 50])
        for m, v in want.items():
            assert got[m][r].item() == pytest.approx(v, abs=1e-12), (r, m)


def test_link_replicates_draw_each_pair_once_with_its_negatives():
    """fgx/link/evaluate.py's replicates for a table's ordering test: each replicate draws the distinct
    positives by global pair id from the stream every run shares (fgx.metrics.copy_draws), a pair two clients
    hold moving in both at once, and scores every client on its drawn positives with their rows of negatives
    exactly as link_metrics scores that resample written out; the mean skips a client that drew nothing."""
    import numpy as np

    from fgx.link.evaluate import LinkItems, link_replicates
    from fgx.link.metrics import link_metrics
    from fgx.metrics import copy_draws

    g = torch.Generator().manual_seed(3)
    ids = [torch.arange(0, 30), torch.arange(20, 50), torch.tensor([99])]      # pairs 20..29 in two clients
    per = [LinkItems(torch.randn(i.numel(), generator=g).double() + 1, torch.randn(i.numel(), 6, generator=g).double(),
                     i, (1, 5)) for i in ids]
    got = link_replicates(per, reps=40)
    counts = copy_draws(torch.cat(ids), 40)
    assert torch.equal(counts[:, 20:30], counts[:, 30:40])            # a shared pair: one draw in both clients
    for r in range(40):
        vals, start = [], 0
        for p in per:
            k = p.pos.numel()
            idx = torch.repeat_interleave(torch.arange(k), counts[r, start:start + k])
            start += k
            vals.append(link_metrics(p.pos[idx], p.neg[idx], [1, 5]) if idx.numel() else
                        {m: float("nan") for m in got})
        for m in got:
            want = np.nanmean([v[m] for v in vals])
            assert got[m][r] == pytest.approx(want, abs=1e-12), (r, m)
    assert all(np.std(v) > 0 for v in got.values())


def test_a_link_runs_replicates_pair_its_methods_and_give_an_ordering_its_data_term(run_fgx, data_root):
    """Two link methods on two seeds, each seed its own split and negatives (link_cora's protocol): every run
    keeps replicates of each model state keyed by its test pairs, the two methods of a seed on one key (their
    replicates pair), the seeds on two; so a table's ordering test (fgx/tables) is decided with the test
    pairs' noise inside the seeds' spread, as for a classification table with per-seed splits."""
    import math

    from fgx.report.runs import find_runs
    from fgx.tables.checks import table_from_runs
    from fgx.tables.stats import NO_DATA

    tiny = ["task=link", "dataset=csbm", "dataset.num_nodes=400", "dataset.num_features=16", "partitioner=random",
            "partitioner.num_clients=3", "rounds=2", "eval_every=1", "model.hidden=16", "output.progress=off",
            f"data_dir={data_root}"]
    dirs = {(a, s): run_fgx(*tiny, f"algorithm={a}", f"seed={s}") for a in ("fedavg", "local") for s in (0, 1)}
    sampling = {k: summary(d)["sampling"] for k, d in dirs.items()}
    for s in (0, 1):
        keys = {x["split"][state] for a in ("fedavg", "local") for x in [sampling[a, s]]
                for state in ("final", "best", "best_client")}
        assert len(keys) == 1 and None not in keys
    assert sampling["fedavg", 0]["split"]["best"] != sampling["fedavg", 1]["split"]["best"]
    for (a, s), d in dirs.items():     # each test positive one item (cross_client=exclude: no pair in two clients)
        positives = sum(c["link_test_positives"] for c in json.loads((d / "partition.json").read_text())["clients"])
        assert sampling[a, s]["items"]["final"] == sampling[a, s]["copies"]["final"] == positives
    assert all(set(x["best"]) == {"roc_auc", "mrr", "hits@10", "hits@50"} for x in sampling.values())
    runs = [r for d in dirs.values() for r in find_runs([d])]
    t = {"by": ["algorithm"], "metric": "best_roc_auc",
         "ordering": [{"key": "algorithm", "order": ["fedavg", "local"], "metric": "best_roc_auc"}]}
    check = next(c for c in table_from_runs("link", t, runs).checks if c.kind == "ordering")
    assert check.test.data == "test items drawn per seed (in the seeds' variance)", check.test.data
    assert check.test.data != NO_DATA and math.isfinite(check.test.se_items) and check.test.p is not None


def test_pos_neg_reads_predict_rows_positives_first():
    from fgx.link.metrics import pos_neg

    scores = torch.tensor([[0.0, 2.0], [0.0, 3.0], [0.0, 1.0], [0.0, -1.0], [0.0, 0.5], [0.0, 4.0]])
    pos, neg = pos_neg(scores, torch.tensor([1, 1, 0, 0, 0, 0]))
    assert pos.tolist() == [2.0, 3.0] and neg.tolist() == [[1.0, -1.0], [0.5, 4.0]]
    with pytest.raises(ValueError, match="positives first"):
        pos_neg(scores, torch.tensor([0, 1, 1, 0, 0, 0]))


# -- the mechanism: negatives and the message-passing graph, inside a run ---------------------------------

def known_pairs(edge_index: torch.Tensor) -> set[tuple[int, int]]:
    return {(min(u, v), max(u, v)) for u, v in edge_index.t().tolist()}


def client_pairs(c, split: str, label: int) -> list[tuple[int, int]]:
    d = c.data
    m = getattr(d, f"link_{split}_mask") & (d.link_y == label)
    g = d.global_node_id[d.link_index[:, m]]
    return list(zip(g[0].tolist(), g[1].tolist()))


@pytest.mark.parametrize("policy", ["exclude", "both", "source"])
def test_negatives_are_never_edges_and_only_training_positives_pass_messages(run_fgx, data_root, recorded,
                                                                             monkeypatch, policy):
    """Every negative of every split (the ones drawn once, and the fresh ones of every training step) is a
    non-edge of the whole graph with a source the client owns; the message-passing graph of every client is
    its training positives, so no validation or test pair of any client reaches an embedding."""
    import fgx.link.model as link_model

    steps = []
    real = link_model.fresh_pairs

    def spy(view):
        pairs = real(view)
        steps.append((view, pairs))
        return pairs

    monkeypatch.setattr(link_model, "fresh_pairs", spy)
    run_fgx(*CORA, "algorithm=fedavg", f"task.cross_client={policy}", f"data_dir={data_root}")
    edges = known_pairs(recorded["data"].edge_index)          # the dataset's graph, before the link task
    clients = recorded["clients"]
    held_out = set()
    for c in clients:
        for split in ("val", "test"):
            held_out |= {tuple(sorted(p)) for p in client_pairs(c, split, 1)}
    assert held_out and held_out <= edges
    for c in clients:
        d = c.data
        owned = set(c.nodes.tolist())
        for split in ("train", "val", "test"):
            negs = client_pairs(c, split, 0)
            assert negs and all(u in owned for u, _ in negs), (c.cid, split)
            assert not {tuple(sorted(p)) for p in negs} & edges, (c.cid, split)   # no edge, no held-out positive
        mp = known_pairs(d.global_node_id[d.edge_index])
        assert mp == {tuple(sorted(p)) for p in client_pairs(c, "train", 1)}, c.cid
        assert not mp & held_out, c.cid
        if policy == "exclude":
            assert all(u in owned and v in owned for u, v in mp)
    assert steps, "no training step drew fresh negatives"
    ids = {id(c.data.x): c for c in clients}
    for view, pairs in steps:
        c = ids[id(view.x)]
        fresh = c.data.global_node_id[pairs[:, view.link_redraw]]
        assert not known_pairs(fresh) & edges
        assert torch.equal(pairs[0, view.link_redraw], view.link_index[0, view.link_redraw])   # the sources stay


def test_cross_client_policies_hold_what_they_say(run_fgx, data_root, recorded):
    run_fgx(*CORA, "algorithm=local", "task.cross_client=source", f"data_dir={data_root}")
    owner = {}
    for c in recorded["clients"]:
        owner.update({n: c.cid for n in c.nodes.tolist()})
    held = {}
    for c in recorded["clients"]:
        for split in ("train", "val", "test"):
            for u, v in client_pairs(c, split, 1):
                if owner[u] != owner[v]:
                    held.setdefault(tuple(sorted((u, v))), []).append(c.cid)
    assert held
    for (u, v), who in held.items():
        assert who == [owner[u]], (u, v, who)           # one holder: the owner of the smaller id


def test_a_consistent_split_for_a_pair_held_by_both(data_root):
    import logging

    from fgx.data.base import DataEnv
    from fgx.data.planetoid import PlanetoidParams, load_planetoid
    from fgx.link.params import TaskParams
    from fgx.link.split import CODE, as_link_dataset, client_link_graphs
    from fgx.partition.base import build_clients
    from fgx.partition.louvain import LouvainParams, louvain_partition

    ds = load_planetoid(PlanetoidParams(), DataEnv(data_root, 0, logging.getLogger("test")))
    task = TaskParams(name="link", cross_client="both")
    ds = as_link_dataset(ds, task, 0)
    clients = build_clients(ds.data, ds.info, louvain_partition(LouvainParams(num_clients=5), ds.data, ds.info, 0))
    client_link_graphs(clients, ds.data, task, 0)
    n = ds.data.num_nodes
    ei = ds.data.edge_index
    split_of = dict(zip((ei.min(0).values * n + ei.max(0).values).tolist(), ds.data.link_split.tolist()))
    seen = 0
    for c in clients:
        for split in ("train", "val", "test"):
            for u, v in client_pairs(c, split, 1):
                assert split_of[min(u, v) * n + max(u, v)] == CODE[split]
                seen += 1
    assert seen > ds.info.extra["link_pairs"] * 0.5


# -- the methods ------------------------------------------------------------------------------------------

LEARN = {"local": [], "fedavg": [], "fedprox": ["algorithm.mu=0.01"], "fedper": [],
         "scaffold": ["algorithm.lr=0.3"],            # SGD: its preset's 0.5 diverges on the dot product
         "moon": ["algorithm.mu=0.1"]}                # mu = 1 keeps the link model's cross-entropy at log 2


@pytest.mark.parametrize("algo", sorted(LEARN))
def test_each_method_learns_link_prediction_on_cora(run_fgx, data_root, algo):
    s = summary(run_fgx("task=link", "dataset=cora", "partitioner.num_clients=5", "rounds=12", "eval_every=12",
                        "output.progress=off", f"algorithm={algo}", *LEARN[algo], f"data_dir={data_root}"))
    assert s["final"]["roc_auc"] > 0.7, (algo, s["final"])
    assert s["final"]["mrr"] > 0.15, (algo, s["final"])


@pytest.mark.parametrize("algo", ["fedgcn", "fedsage_plus", "fedpub", "ce_fedgnn", "fedproto"])
def test_other_methods_refuse_task_link_naming_the_allowed_ones(run_fgx, data_root, algo):
    with pytest.raises(SystemExit) as e:
        run_fgx("task=link", "dataset=cora", f"algorithm={algo}", f"data_dir={data_root}")
    assert (f"algorithm.name='{algo}' is not allowed; allowed: an algorithm that supports the 'link' task of dataset "
            f"'planetoid': one of ['fedavg', 'fedper', 'fedprox', 'local', 'moon', 'scaffold']") in str(e.value)


@pytest.mark.parametrize("over, message", [
    (["model=unifilter"], "model.name='unifilter' is not allowed; allowed: a model that supports the 'link' task of dataset "
                      "'planetoid': one of ['gcn', 'gin', 'sage']"),
    (["algorithm.fanouts=[5,5]", "algorithm.batch_size=64"], "algorithm.fanouts=[5, 5] is not allowed; allowed: null "
                                                              "with task=link"),
    (["task.split=temporal"], "task.split='temporal' is not allowed; allowed: random, or a dataset with edge times"),
    (["metrics=[accuracy]"], "metrics=['accuracy'] is not allowed; allowed: null with task=link (its metrics are "
                             "['roc_auc', 'mrr', 'hits@10', 'hits@50'])"),
    (["task.main_metric=hits@20"], "task.main_metric='hits@20' is not allowed; allowed: one of ['roc_auc', 'mrr', "
                                   "'hits@10', 'hits@50']"),
    (["task.val=0.5", "task.test=0.5"], "task.test=0.5 is not allowed; allowed: < 0.5"),
    (["eval.subset=100"], "eval.subset=100 is not allowed; allowed: null with task=link"),
    (["unlearning=retrain"], "unlearning.name='retrain' is not allowed; allowed: none with task=link"),
    (["dataset=mutag"], "dataset.name='tu' is not allowed; allowed: a graph the link task can split into node pairs"),
])
def test_link_config_refusals_before_any_work(run_fgx, data_root, over, message):
    with pytest.raises(SystemExit) as e:
        run_fgx("task=link", "dataset=cora", "algorithm=fedavg", f"data_dir={data_root}", *over)
    assert message in str(e.value)
