"""Baselines (issue #5): a one-round run of each on a tiny graph, plus the invariant of each method."""
from __future__ import annotations

import json

import pytest
import torch


def _metrics(run):
    rows = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
    return [(r["round"], r["split"], r["mean"], r.get("train_loss")) for r in rows]


def _keys(payload) -> set[str]:
    if isinstance(payload, dict):
        return set(payload) | {k for v in payload.values() for k in _keys(v)}
    if isinstance(payload, (list, tuple)):
        return {k for v in payload for k in _keys(v)}
    return set()


ONE_ROUND = {"fedprox": [], "fedper": [], "fedgcn": ["dataset.features_public=true", "algorithm.hops=1"],
             "gcfl": [], "fedpub": [], "swift_fedgnn": [],
             "fedsage_plus": ["model=sage", "algorithm.local_gen_epochs=2", "algorithm.fed_gen_epochs=2"]}


@pytest.mark.parametrize("algo", sorted(ONE_ROUND))
def test_one_round_runs(algo, run_fgx, tiny_cfg):
    run = run_fgx(*tiny_cfg, f"algorithm={algo}", *ONE_ROUND[algo], "rounds=1")
    s = json.loads((run / "summary.json").read_text())
    assert s["status"] == "completed" and 0.0 <= s["final"]["accuracy"] <= 1.0
    assert json.loads((run / "comm.json").read_text())["total_bytes"] > 0


def test_fedprox_mu_zero_is_fedavg(run_fgx, tiny_cfg):
    a = run_fgx(*tiny_cfg, "algorithm=fedavg", "rounds=2")
    b = run_fgx(*tiny_cfg, "algorithm=fedprox", "algorithm.mu=0.0", "rounds=2")
    c = run_fgx(*tiny_cfg, "algorithm=fedprox", "algorithm.mu=1.0", "rounds=2")
    assert _metrics(a) == _metrics(b)
    assert _metrics(a) != _metrics(c)      # the proximal term does act when mu > 0


def test_fedprox_term_pulls_towards_global():
    from fgx.algorithms.fedprox import Proximal
    from fgx.federation.client import ClientState

    model = torch.nn.Linear(3, 2)
    state = ClientState(0, None, model, None, "node")
    term = Proximal(2.0, {k: v.detach().clone() for k, v in model.named_parameters()})
    assert float(term.term(state, None).detach()) == 0.0
    with torch.no_grad():
        model.weight += 1.0
    assert float(term.term(state, None).detach()) == pytest.approx(0.5 * 2.0 * 6)
    # its batched form: the same term for every row of stacked parameters
    stacked = {k: torch.stack([v.detach(), v.detach() + 1.0]) for k, v in model.named_parameters()}
    assert term.batched_term(stacked).tolist() == pytest.approx([0.5 * 2.0 * 6, 0.5 * 2.0 * (6 * 4 + 2)])


def test_fedprox_term_in_a_run_is_the_distance_to_the_weights_the_server_sent(recorded, run_fgx, tiny_cfg,
                                                                              monkeypatch):
    """Inside a run (issue 67 (c)): every proximal term a client's local step adds is (μ/2)·‖w − w_r‖²,
    w its current parameters and w_r the global weights the server sent it in that round (read from
    the channel), not a decay towards zero or towards another round's model."""
    from fgx.algorithms.fedprox import FedProx, Proximal

    mu, rnd, seen = 0.3, [0], []
    real_objective, real_term = FedProx.client_objective, Proximal.term

    def objective(self, chosen, weights, r):
        rnd[0] = r
        return real_objective(self, chosen, weights, r)

    def term(self, state, step):
        out = real_term(self, state, step)
        seen.append((rnd[0], state.cid, float(out.detach()),
                     {n: w.detach().double().clone() for n, w in state.model.named_parameters()}))
        return out

    monkeypatch.setattr(FedProx, "client_objective", objective)
    monkeypatch.setattr(Proximal, "term", term)
    run_fgx(*tiny_cfg, "algorithm=fedprox", f"algorithm.mu={mu}", "algorithm.local_steps=3", "rounds=2")
    sent = {(r, dst): p for k, p, src, dst, r in recorded["sent"] if k == "global_weights"}
    # 2 rounds x 3 clients x the 2 steps after the first (at the sent weights the term and its gradient are 0:
    # the loop skips it there, Proximal.vanishes_at_start)
    assert {r for r, *_ in seen} == {1, 2} and len(seen) == 2 * 3 * 2
    for r, cid, value, w in seen:
        g = sent[(r, cid)]
        want = 0.5 * mu * sum(float((w[n] - g[n].double()).pow(2).sum()) for n in w)
        assert value == pytest.approx(want, rel=1e-4, abs=1e-9), f"round {r}, client {cid}"
    assert max(v for _, _, v, _ in seen) > 1e-6          # the clients moved away from the sent weights


def test_fedper_head_never_leaves_a_client(recorded, run_fgx, tiny_cfg):
    run = run_fgx(*tiny_cfg, "algorithm=fedper", "rounds=2")
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"
    kinds = {k for k, *_ in recorded["sent"]}
    assert kinds == {"global_base", "base_update"}
    sent_keys = set().union(*(_keys(p) for _, p, *_ in recorded["sent"]))
    ckpt = torch.load(run / "checkpoint.pt", weights_only=True)
    models = ckpt["algorithm"]["models"] if "algorithm" in ckpt else ckpt["models"]
    all_keys = set(models[0])
    head = {k for k in all_keys if k.startswith("classifier.")}   # the default GCN's last layer is its classifier
    assert head and not (sent_keys & head)
    assert sent_keys == all_keys - head          # the whole base is federated
    # the heads are personal: clients end with different heads, the same base
    k = sorted(head)[0]
    assert not torch.equal(models[0][k], models[1][k])


def test_fedgcn_sends_the_aggregates_once_and_they_are_right(recorded, run_fgx, tiny_cfg):
    run = run_fgx(*tiny_cfg, "algorithm=fedgcn", "algorithm.hops=2", "dataset.features_public=true", "rounds=2")
    comm = json.loads((run / "comm.json").read_text())
    n = len(recorded["clients"])
    assert comm["messages"]["neighbour_sums"] == n and comm["messages"]["aggregated_features"] == n
    for r, kinds in comm["per_round"].items():       # only in the setup exchange (round 0)
        assert ("neighbour_sums" in kinds) == (r == "0") and ("aggregated_features" in kinds) == (r == "0")
    # what each client received is (A + I) X of the global graph on its own nodes and its halo
    data = recorded["data"]
    agg = data.x.float().clone().index_add_(0, data.edge_index[1], data.x.float()[data.edge_index[0]])
    got = [(dst, p) for k, p, src, dst, _ in recorded["sent"] if k == "aggregated_features"]
    assert len(got) == n
    for dst, p in got:
        c = recorded["clients"][dst]
        assert torch.allclose(p, agg[torch.cat([c.nodes, c.halo])], atol=1e-5)


def test_fedgcn_refuses_private_features_and_hops0_sends_nothing_extra(run_fgx, tiny_cfg):
    with pytest.raises(SystemExit, match="dataset.features_public"):      # before any work, no run directory
        run_fgx(*tiny_cfg, "algorithm=fedgcn", "rounds=1")
    run = run_fgx(*tiny_cfg, "algorithm=fedgcn", "algorithm.hops=0", "rounds=1")
    assert set(json.loads((run / "comm.json").read_text())["totals"]) == {"global_weights", "update"}


def test_gcfl_clusters_partition_the_clients(run_fgx, tiny_cfg):
    n = 5
    run = run_fgx(*tiny_cfg, "algorithm=gcfl", f"partitioner.num_clients={n}", "rounds=3", "algorithm.eps1=100",
                  "algorithm.eps2=0", "algorithm.warmup_rounds=0")
    rows = [json.loads(l) for l in (run / "gcfl_clusters.jsonl").read_text().splitlines()]
    assert len(rows) == 3
    for row in rows:
        members = [c for cl in row["clusters"] for c in cl]
        assert sorted(members) == list(range(n)) and all(row["clusters"])
    assert len(rows[-1]["clusters"]) > 1           # the forced split conditions did split


def test_gcfl_averages_updates_inside_each_cluster_only(recorded, run_fgx, tiny_cfg):
    """After a split, a cluster's next model is its model plus the train-weighted mean of its own
    members' updates (not of every client's)."""
    from fgx.algorithms.base import weighted_average

    n = 5
    run = run_fgx(*tiny_cfg, "algorithm=gcfl", f"partitioner.num_clients={n}", "rounds=3", "algorithm.eps1=100",
                  "algorithm.eps2=0", "algorithm.warmup_rounds=1")
    rows = [json.loads(l)["clusters"] for l in (run / "gcfl_clusters.jsonl").read_text().splitlines()]
    sizes = {c.cid: int(c.data.train_mask[: c.num_owned].sum()) for c in recorded["clients"]}
    sent = {(k, src, dst, r): p for k, p, src, dst, r in recorded["sent"]}
    checked = 0
    for r in (1, 2):
        for cluster in rows[r - 1]:
            if len(cluster) == n:
                continue                                   # the unsplit cluster: FedAvg of everyone
            start = sent[("cluster_weights", "server", cluster[0], r)]
            nxt = sent[("cluster_weights", "server", cluster[0], r + 1)]
            upd = weighted_average([sent[("update", c, "server", r)] for c in cluster],
                                   [max(sizes[c], 1) for c in cluster])
            for k, v in start.items():
                if v.is_floating_point():
                    torch.testing.assert_close(nxt[k], v + upd[k])
            checked += 1
    assert checked >= 2                                    # both halves of a split were checked


def test_gcfl_diagnostics_are_its_split_conditions_measured_on_the_sent_updates(recorded, run_fgx, tiny_cfg):
    """metrics.jsonl shows how far each round was from GCFL's split condition: ‖mean update‖ / eps1
    (a split needs < 1) and ‖largest update‖ / eps2 (> 1), computed from the updates the clients sent."""
    run = run_fgx(*tiny_cfg, "algorithm=gcfl", "partitioner.num_clients=4", "rounds=2", "algorithm.eps1=0.5",
                  "algorithm.eps2=0.2", "algorithm.warmup_rounds=1")
    rows = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines() if "mean_norm_over_eps1" in l]
    for r in (1, 2):
        sent = torch.stack([torch.cat([v.flatten().float() for v in p.values()])
                            for k, p, src, dst, rr in recorded["sent"] if k == "update" and rr == r])
        row = next(x for x in rows if x["round"] == r)
        assert row["mean_norm_over_eps1"] == pytest.approx(float(sent.mean(0).norm()) / 0.5, rel=1e-5)
        assert row["max_norm_over_eps2"] == pytest.approx(float(sent.norm(dim=1).max()) / 0.2, rel=1e-5)
    diag = json.loads((run / "summary.json").read_text())["diagnostics"]
    assert diag["mean_norm_over_eps1"]["min"] == pytest.approx(min(x["mean_norm_over_eps1"] for x in rows))


def test_gcfl_default_warmup_ends_inside_the_run_and_a_longer_one_is_refused(run_fgx, tiny_cfg):
    run = run_fgx(*tiny_cfg, "algorithm=gcfl", "partitioner.num_clients=5", "rounds=3", "algorithm.eps1=100",
                  "algorithm.eps2=0")                  # default warm-up: rounds // 10 = 0
    rows = [json.loads(l)["clusters"] for l in (run / "gcfl_clusters.jsonl").read_text().splitlines()]
    assert len(rows[0]) > 1                            # the forced conditions split in round 1
    with pytest.raises(SystemExit, match="algorithm.warmup_rounds"):
        run_fgx(*tiny_cfg, "algorithm=gcfl", "rounds=3", "algorithm.warmup_rounds=3")


def test_gcfl_min_cut_separates_opposite_updates():
    from fgx.algorithms.gcfl import min_cut_bipartition

    u = torch.tensor([[1.0, 0.0], [0.9, 0.1], [1.0, 0.05], [-1.0, 0.0], [-0.9, -0.1]])
    sim = torch.nn.functional.cosine_similarity(u[:, None], u[None], dim=-1)
    a, b = min_cut_bipartition(sim)
    assert {tuple(a), tuple(b)} == {(0, 1, 2), (3, 4)}


def test_fedpub_recorded_weights_follow_the_sent_embeddings(recorded, run_fgx, tiny_cfg):
    """fedpub_weights.jsonl holds W_ij ∝ exp(τ cos(e_i, e_j)) n_j of the embeddings the clients sent."""
    run = run_fgx(*tiny_cfg, "algorithm=fedpub", "rounds=2")
    rows = [json.loads(l) for l in (run / "fedpub_weights.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    n = torch.tensor([int(c.data.train_mask[: c.num_owned].sum()) for c in recorded["clients"]], dtype=torch.float)
    for r, row in enumerate(rows, start=1):
        emb = torch.stack([p for k, p, _, _, rr in recorded["sent"] if k == "functional_embedding" and rr == r])
        e = torch.nn.functional.normalize(emb, dim=1)
        w = torch.exp(3.0 * e @ e.T) * n[None, :]
        assert torch.allclose(torch.tensor(row["W"]), w / w.sum(1, keepdim=True), atol=1e-5)
    totals = json.loads((run / "comm.json").read_text())["totals"]
    assert set(totals) == {"proxy_graph", "personalised_weights", "weights", "functional_embedding"}
    # each client learns a sparse mask for every weight matrix (not for biases), which the L1 term moves
    ckpt = torch.load(run / "checkpoint.pt", weights_only=True)
    algo = ckpt["algorithm"] if "algorithm" in ckpt else ckpt
    for model, masks in zip(algo["models"], algo["masks"]):
        assert set(masks) == {k for k, v in model.items() if v.dim() >= 2} and masks
        assert all(masks[k].shape == model[k].shape for k in masks)
        assert any(not torch.equal(m, torch.ones_like(m)) for m in masks.values())


def test_fedpub_similarity_weights_formula():
    from fgx.algorithms.fedpub import similarity_weights

    e = torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    n = torch.tensor([10, 20, 30])
    W = similarity_weights(e, n, tau=3.0)
    cos = torch.nn.functional.cosine_similarity(e[:, None], e[None], dim=-1)
    raw = torch.exp(3.0 * cos) * n[None, :]
    assert torch.allclose(W, raw / raw.sum(1, keepdim=True), atol=1e-6)


def test_fedpub_refuses_clients_too_large_for_full_batch(run_fgx, tiny_cfg, capsys):
    run = run_fgx(*tiny_cfg, "algorithm=fedpub", "algorithm.max_client_nodes=10", "rounds=1", expect_rc=2)
    err = capsys.readouterr().err
    assert "algorithm.max_client_nodes" in err and "full batch" in err and not run.exists()


def test_gcfl_with_eps1_zero_runs_and_never_splits(run_fgx, tiny_cfg):
    """eps1 = 0: no mean update norm is below it, so GCFL never splits; its diagnostic ratio is inf,
    not a division by zero (seed-4 mutation sample)."""
    run = run_fgx(*tiny_cfg, "algorithm=gcfl", "partitioner.num_clients=4", "rounds=2", "algorithm.eps1=0",
                  "algorithm.eps2=0", "algorithm.warmup_rounds=0")
    rows = [json.loads(l)["clusters"] for l in (run / "gcfl_clusters.jsonl").read_text().splitlines()]
    assert rows and all(len(r) == 1 for r in rows)
