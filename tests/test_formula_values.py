"""Values of the methods' formulas against independent restatements of their papers' or authors' code,
and the names a run's records and errors carry. Each test here answers a mutant that survived the seed-1
mutation sample of fgx/algorithms (docs/mutation/fgx_algorithms.md, docs/testing.md): a change of a
scale, a sign, a normalisation or a key that no focused test read. The tests after "seed-2 sample" answer
that sample's survivors the same way."""
from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

from mechanisms import capture_setup


def _jsonl(path):
    return [json.loads(l) for l in path.read_text().splitlines()]


# ---- FedTAD: the generator's diversity term -----------------------------------------------------------

def test_fedtad_diversity_loss_is_the_authors_pairwise_mean_distances():
    """FedTAD's DiversityLoss (metric l1 on the generated features, l2 on the noise): each pair's noise
    distance is the *mean* over noise dimensions of the squared difference and its feature distance the
    mean absolute difference; the loss is exp(-mean over all pairs of their product)."""
    from fgx.algorithms.fedtad import diversity_loss

    g = torch.Generator().manual_seed(0)
    noise, x = torch.randn(7, 5, generator=g), torch.randn(7, 11, generator=g)
    noise_d = (noise[None, :, :] - noise[:, None, :]).pow(2).mean(2)
    feat_d = (x[None, :, :] - x[:, None, :]).abs().mean(2)
    torch.testing.assert_close(diversity_loss(noise, x), torch.exp(-(noise_d * feat_d).mean()))


def test_fedtad_refuses_a_model_without_message_passing_naming_the_key(run_fgx, tiny_cfg, capsys):
    run = run_fgx(*tiny_cfg, "algorithm=fedtad", "model=gamlp", "rounds=1", expect_rc=2)
    err = capsys.readouterr().err
    assert "model.name='gamlp'" in err and "message-passing" in err
    assert not run.exists()


# ---- FedGTA: the fallback when no accepted client has confidence ---------------------------------------

def test_fedgta_weights_fall_back_to_uniform_over_each_clients_own_accepted_set():
    from fgx.algorithms.fedgta import aggregation_weights

    m = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]])
    W = aggregation_weights(m, torch.zeros(3), accept_alpha=0.5)
    # clients 0 and 1 accept each other, client 2 only itself: each row is uniform over its own set
    torch.testing.assert_close(W, torch.tensor([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0], [0.0, 0.0, 1.0]]))
    torch.testing.assert_close(W.sum(1), torch.ones(3))


# ---- FedHGNN: semantic attention over meta-paths ---------------------------------------------------------

def test_fedhgnn_semantic_attention_weighs_meta_paths_by_their_node_averaged_score():
    """HAN's semantic attention: w_p = mean over nodes of q·tanh(W z_{n,p} + b); β = softmax_p(w);
    the output is Σ_p β_p z_{n,p}: one weight per meta-path, shared by every node."""
    from fgx.algorithms.fedhgnn import SemanticAttention

    torch.manual_seed(0)
    att = SemanticAttention(4, hidden=6)
    z = torch.randn(9, 3, 4)                  # 9 nodes, 3 meta-paths (fewer paths than nodes)
    lin1, lin2 = att.project[0], att.project[2]
    w = torch.stack([(torch.tanh(z[:, p] @ lin1.weight.T + lin1.bias) @ lin2.weight.T).mean() for p in range(3)])
    beta = torch.softmax(w, 0)
    want = sum(beta[p] * z[:, p] for p in range(3))
    torch.testing.assert_close(att(z), want)


# ---- FedIIH: the hierarchical VGAE's negative ELBO ------------------------------------------------------

def _elbo_inputs(n=6, K=2, d=3):
    g = torch.Generator().manual_seed(3)
    mu, logvar = torch.randn(n, K, d, generator=g), 0.3 * torch.randn(n, K, d, generator=g)
    prior = torch.randn(K, d, generator=g)
    return mu, logvar, prior


def test_fediih_elbo_kl_terms_use_the_conjugate_client_posterior():
    """Without edges the reconstruction term is 0 and the loss is the two KL terms: each node's posterior
    against q(c) = N((Σ_n μ_n + α)/(n+1), 1/(n+1)) (the conjugate optimum under p(c) = N(α, 1),
    p(z_n | c) = N(c, 1)), averaged; and q(c) against the prior, averaged and divided by n."""
    from fgx.algorithms.fediih import negative_elbo

    mu, logvar, prior = _elbo_inputs()
    n = mu.size(0)
    no_edges = torch.tensor([[0, 1], [0, 1]])            # self-loops only: no positive pair to reconstruct
    got = negative_elbo(mu, logvar, no_edges, prior, torch.Generator().manual_seed(0))
    c_mean, c_var = (mu.sum(0) + prior) / (n + 1), 1.0 / (n + 1)
    kl_nodes = 0.5 * (logvar.exp() + (mu - c_mean) ** 2 + c_var - 1.0 - logvar)
    kl_client = 0.5 * (c_var + (c_mean - prior) ** 2 - 1.0 - math.log(c_var))
    torch.testing.assert_close(got, kl_nodes.mean() + kl_client.mean() / n)


def test_fediih_elbo_draws_only_from_its_generator():
    """The reparameterised sample and the negative edges come from the generator the client passes, so
    a client's update does not depend on (or consume) torch's global random stream."""
    from fgx.algorithms.fediih import negative_elbo

    mu, logvar, prior = _elbo_inputs(n=12)
    ei = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 4, 5, 6, 7, 8]])
    vals = []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)
        vals.append(negative_elbo(mu, logvar, ei, prior, torch.Generator().manual_seed(5)))
    assert vals[0] == vals[1]


# ---- FedProto: the regulariser share exists once there are global prototypes ------------------------------

def test_fedproto_reports_a_regulariser_share_only_from_the_round_that_has_global_prototypes(run_fgx, tiny_cfg):
    run = run_fgx(*tiny_cfg, "algorithm=fedproto", "rounds=2", "eval_every=1")
    rows = [r for r in _jsonl(run / "metrics.jsonl") if r["split"] == "test"]
    assert "regulariser_share" not in rows[0]          # round 1: nothing to regularise towards
    assert rows[1]["regulariser_share"] > 0


# ---- FedSage+: what setup records and NeighGen's optimiser ---------------------------------------------

def test_fedsage_plus_records_the_generated_neighbours_per_client(run_fgx, tiny_cfg):
    run = run_fgx(*tiny_cfg, "algorithm=fedsage_plus", "rounds=1")
    rec = _jsonl(run / "fedsage_mended.jsonl")
    assert len(rec) == 1 and len(rec[0]["generated_nodes"]) == 3
    assert all(isinstance(k, int) and k >= 0 for k in rec[0]["generated_nodes"])


def test_fedsage_plus_neighgen_adam_is_fused_on_cpu():
    """fGen's last layer has num_pred·F·2048 weights; the fused Adam is what keeps its step affordable."""
    from fgx.algorithms.fedsage_plus import FedSagePlusParams, adam

    opt = adam([nn.Parameter(torch.zeros(3))], FedSagePlusParams(), torch.device("cpu"))
    assert opt.defaults["fused"] is True


# ---- F2MF: the server's group statistics are the sum over clients ---------------------------------------

def test_f2mf_global_group_statistics_are_the_sum_of_every_clients(recorded, run_fgx):
    from tests.test_diagnostics import RECSYS

    run_fgx(*RECSYS, "algorithm=f2mf", "algorithm.local_epochs=1")
    for r in (1, 2):
        sent = [p for kind, p, src, dst, rr in recorded["sent"] if kind == "group_stats" and rr == r]
        got = [p for kind, p, src, dst, rr in recorded["sent"] if kind == "global_group_stats" and rr == r]
        assert len(sent) == 3 and len(got) == 3
        want = sum(s.float().double() for s in sent).float()
        assert not torch.allclose(want, sent[-1].float())     # the check can tell the sum from one client's
        for g in got:
            torch.testing.assert_close(g, want)


# ---- gossip: the training error reported per node ---------------------------------------------------------

def test_gossip_train_metric_is_the_mean_squared_error_over_the_nodes_rows(run_fgx, monkeypatch):
    import fgx.algorithms.gossip as gossip
    from tests.test_mechanism_gossip import GOSSIP

    seen = []
    real = gossip.GossipSGD.client_metrics

    def metrics(self, client):
        out = real(self, client)
        u = client.cid
        x, y = self.x[u].reshape(-1, self.x.size(-1)), self.y[u].reshape(-1)
        with torch.no_grad():
            err = torch.stack([self.flat.predict(self.theta[u], x[i:i + 1]).reshape(()) - y[i] for i in range(len(y))])
        seen.append((out["train"]["mse"], float((err ** 2).mean())))
        return out
    monkeypatch.setattr(gossip.GossipSGD, "client_metrics", metrics)
    run_fgx(*GOSSIP, "algorithm=dp_dsgd")
    assert seen
    for got, want in seen:
        assert got == pytest.approx(want, rel=1e-5)


# ---- FedProx: the proximal term also acts in neighbour-sampled training -----------------------------------

def test_fedprox_proximal_term_acts_in_sampled_minibatch_training(run_fgx, tiny_cfg):
    sampled = ["algorithm.batch_size=16", "algorithm.fanouts=[3,3]", "algorithm.local_steps=4", "rounds=2"]

    def final(mu):
        run = run_fgx(*tiny_cfg, "algorithm=fedprox", f"algorithm.mu={mu}", *sampled)
        return [(r["round"], r.get("train_loss")) for r in _jsonl(run / "metrics.jsonl") if r["split"] == "test"]

    a, b = final(0.0), final(5.0)
    assert a[0][1] == a[0][1] and b[0][1] == b[0][1]
    assert a != b


# ---- Swift-FedGNN -----------------------------------------------------------------------------------

def test_swift_cross_step_uses_a_minibatch_of_the_training_nodes(monkeypatch):
    """With batch_size < n, the cross-client step's loss is the cross-entropy over batch_size training
    nodes drawn with the step's generator, not over all of them."""
    import fgx.algorithms.swift_fedgnn as swift
    import fgx.federation.client as runtime
    from fgx.algorithms.swift_fedgnn import SwiftFedGNNParams, cross_step

    n, c = 10, 3
    logits = nn.Parameter(torch.randn(n, c, generator=torch.Generator().manual_seed(1)))
    y = torch.arange(n) % c
    mask = torch.ones(n, dtype=torch.bool)
    monkeypatch.setattr(swift, "cross_forward", lambda model, view, sw, remote: logits * 1.0)
    monkeypatch.setattr(runtime, "targets", lambda view, task, split: (mask, y))     # the one loop's training items

    class State:
        cid, task, loss_weight = 0, "node", None
        view = type("V", (), {"x": torch.zeros(n, 2)})()
        swift = {"count": torch.ones(n)}
        model = nn.Linear(1, 1)
        optimizer = torch.optim.SGD([logits], lr=0.0)

    p = SwiftFedGNNParams(batch_size=4)
    got = cross_step(State(), {}, p, torch.Generator().manual_seed(7))
    batch = torch.randperm(n, generator=torch.Generator().manual_seed(7))[:4]
    want = float(nn.functional.cross_entropy(logits.detach()[batch], y[batch]))
    assert got == pytest.approx(want, rel=1e-6)
    assert got != pytest.approx(float(nn.functional.cross_entropy(logits.detach(), y)), rel=1e-6)


def test_swift_records_its_cross_iterations_per_round(run_fgx, tiny_cfg):
    run = run_fgx(*tiny_cfg, "algorithm=swift_fedgnn", "algorithm.local_steps=5", "algorithm.period=2", "rounds=2",
                  "eval_every=1")
    rows = [r for r in _jsonl(run / "metrics.jsonl") if r["split"] == "test"]
    cross = _jsonl(run / "swift_cross.jsonl")
    for row in rows:
        assert row["cross_iterations"] == sum(1 for c in cross if c["round"] == row["round"]) > 0


def test_swift_partial_feature_sums_go_to_the_server(recorded, run_fgx, tiny_cfg):
    run_fgx(*tiny_cfg, "algorithm=swift_fedgnn", "algorithm.remote_layer0=aggregate", "dataset.features_public=true",
            "rounds=1")
    dsts = {dst for kind, _, _, dst, _ in recorded["sent"] if kind == "partial_feature_sums"}
    assert dsts == {"server"}


def test_swift_refuses_dropping_layer0_of_a_one_layer_model_naming_the_key(run_fgx, tiny_cfg, capsys):
    with pytest.raises(SystemExit, match="algorithm.remote_layer0"):
        run_fgx(*tiny_cfg, "algorithm=swift_fedgnn", "model.layers=1", "algorithm.remote_layer0=drop", "rounds=1")


# ---- evaluation helpers ------------------------------------------------------------------------------

def test_score_items_with_nothing_to_score_returns_no_split():
    """A client with no evaluation items (no labelled node in its view) gets no split back, and no
    error: the scored set is empty."""
    from fgx.algorithms.base import score_items
    from fgx.sampler import NeighborSampler

    sampler = NeighborSampler(torch.tensor([[0, 1], [1, 0]]), 2, [2])
    out = score_items(None, "node", {}, sampler, 8, lambda smp: torch.zeros(smp.nodes.numel(), 3), 3, 0)
    assert out == {}


# ---- seed-2 sample ------------------------------------------------------------------------------------

def test_fedtgp_prototype_generator_has_the_authors_relu_between_its_layers():
    """FedTGP's Trainable_prototypes (authors' code): embedding -> Linear -> ReLU -> Linear. With every
    hidden pre-activation negative the ReLU zeroes them, so the output is the last layer's bias."""
    from fgx.algorithms.fedtgp import TrainablePrototypes

    m = TrainablePrototypes(num_classes=3, dim=4)
    with torch.no_grad():
        m.embedding.weight.fill_(-1.0)
        m.middle[0].weight.copy_(torch.eye(4))
        m.middle[0].bias.zero_()
        m.fc.weight.fill_(0.5)
        m.fc.bias.copy_(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    out = m(torch.tensor([0, 2]))
    torch.testing.assert_close(out, torch.tensor([[1.0, 2.0, 3.0, 4.0]] * 2))


def test_fedgnn_refuses_fanouts_saying_it_runs_on_the_whole_expanded_subgraph(run_fgx, tiny_cfg):
    with pytest.raises(SystemExit, match=r"algorithm\.fanouts=\[3, 3\] .*FedGNN runs on the whole expanded subgraph"):
        run_fgx(*tiny_cfg, "algorithm=fedgnn", "algorithm.fanouts=[3,3]", "rounds=1")


def test_fedgnn_max_expanded_caps_the_remote_neighbours_each_node_receives(recorded, run_fgx, tiny_cfg):
    """With max_expanded = 1 every node gets at most one remote neighbour, though the graph gives some
    node several (so the cap, not the graph, bounds it)."""
    from collections import Counter

    run_fgx(*tiny_cfg, "algorithm=fedgnn", "rounds=1", "algorithm.max_expanded=1")
    data, clients = recorded["data"], recorded["clients"]
    owner = {int(v): c.cid for c in clients for v in c.nodes}
    remote = Counter(int(n) for w, n in data.edge_index.t().tolist() if owner[int(w)] != owner[int(n)])
    assert max(remote.values()) > 1
    sent = [p for kind, p, *_ in recorded["sent"] if kind == "expanded_neighbours"]
    assert sent
    for p in sent:
        rows = p["nodes"].tolist()
        assert rows and max(Counter(rows).values()) == 1


RANK = ["dataset=synthetic_bipartite", "dataset.num_users=60", "dataset.num_items=80", "dataset.mean_degree=10",
        "partitioner=random_users", "partitioner.num_clients=3", "rounds=1", "output.checkpoint=false"]


@pytest.mark.parametrize("algo,fn,extra", [
    ("fedmf", "bpr_epochs", ["model=mf", "model.dim=8", "algorithm.local_epochs=1"]),
    ("f2mf", "bpr_epochs", []), ("fedhgnn", "bpr_epochs", []), ("fedpergnn", "bpr_epochs", []),
    ("pfedrec", "bpr_epochs", []), ("fedssp", "bpr_graph_epochs", [])])
def test_every_bpr_method_trains_at_its_configured_temperature(algo, fn, extra, run_fgx, monkeypatch):
    """The BPR temperature is the knob the LPSFed table tunes for every BPR row: each call of the BPR
    loop a run makes (pFedRec: its head's and its model's) gets the configured value, not the 1.0 default."""
    import importlib

    mod = importlib.import_module(f"fgx.algorithms.{algo}")
    real, taus = getattr(mod, fn), []

    def spy(*args, **kw):
        taus.append(kw["bpr_tau"] if "bpr_tau" in kw else args[4] if fn == "bpr_graph_epochs" else None)
        return real(*args, **kw)

    monkeypatch.setattr(mod, fn, spy)
    run_fgx(*RANK, f"algorithm={algo}", *extra, "algorithm.bpr_tau=0.37")
    assert taus and all(t == pytest.approx(0.37) for t in taus), taus
    if algo == "pfedrec":
        assert len(taus) == 2 * 3            # per client: the head's epochs, then the model's


def test_fedpergnn_item_tokens_are_keyed_63_bit_blake2b_digests():
    """The docstring's promise: 63-bit tokens (the digest's top 63 bits, non-negative in int64), equal for
    equal items under one key and different under another."""
    import hashlib

    from fgx.algorithms.fedpergnn import item_tokens

    items, key = torch.arange(64), b"shared-key"
    tok = item_tokens(items, key)
    want = [int.from_bytes(hashlib.blake2b(int(i).to_bytes(8, "little"), key=key, digest_size=8).digest(), "little") >> 1
            for i in items.tolist()]
    assert tok.tolist() == want
    assert (tok >= 0).all() and int(tok.max()) >= 2 ** 62       # all 63 bits in use (chance of failing: 2^-64)
    assert torch.equal(item_tokens(items[[5, 5]], key), tok[[5, 5]])
    assert not set(item_tokens(items, b"other-key").tolist()) & set(tok.tolist())


def test_fedgsp_refuses_mini_batches_saying_it_trains_full_batch(run_fgx, tiny_cfg):
    with pytest.raises(SystemExit, match=r"algorithm\.batch_size=8 .*FedGSP trains full batch"):
        run_fgx(*tiny_cfg, "algorithm=fedgsp", "algorithm.batch_size=8")


def test_fedtad_refuses_fewer_generated_nodes_than_classes_naming_the_key(run_fgx, tiny_cfg, capsys):
    run_fgx(*tiny_cfg, "algorithm=fedtad", "algorithm.num_gen=1", "rounds=1", expect_rc=2)
    err = capsys.readouterr().err
    assert "algorithm.num_gen=1" in err and ">= the number of classes" in err


CE = ["dataset=csbm", "dataset.num_nodes=300", "dataset.num_features=16", "partitioner=random",
      "partitioner.num_clients=3", "model=gcn", "model.hidden=16", "algorithm=ce_fedgnn", "rounds=1",
      "algorithm.local_steps=1", "algorithm.batch_size=null", "algorithm.fanouts=null", "output.checkpoint=false"]


def test_ce_fedgnn_node_embeddings_of_a_random_subset_are_rows_of_all_of_them(run_fgx, monkeypatch):
    """Metric DP's rho may be computed on ``max_nodes`` released embeddings drawn at random: each is the
    embedding of some owned node (the full release's row), and the draw depends on the seed."""
    from fgx.algorithms.ce_fedgnn import CEFedGNN

    seen = capture_setup(monkeypatch, CEFedGNN)
    run_fgx(*CE)
    algo = seen["algo"]
    full = algo.node_embeddings()
    assert full.size(0) == sum(c.n_own for c in algo.clients)
    subs = [algo.node_embeddings(max_nodes=7, seed=s) for s in (1, 2)]
    for sub in subs:
        assert sub.size(0) == 7
        assert torch.cdist(sub.double(), full.double()).min(1).values.max() < 1e-6
    assert not torch.equal(subs[0], subs[1])
    torch.testing.assert_close(algo.node_embeddings(max_nodes=7, seed=1), subs[0])     # the seed fixes the draw


def test_fedsage_plus_generated_neighbour_counts_are_clamped_to_zero_and_num_pred():
    """dGen's predicted numbers made integers: floor (or round), never below 0, at most num_pred."""
    from fgx.algorithms.fedsage_plus import counts

    num = torch.tensor([-2.3, -0.4, 0.4, 2.6, 3.7, 9.0])
    assert counts(num, 5).tolist() == [0, 0, 0, 2, 3, 5]
    assert counts(num, 5, rounding="round").tolist() == [0, 0, 0, 3, 4, 5]


@pytest.mark.parametrize("mode,grad", [("straight_through", 1.0), ("scaled", 0.3)])
def test_ce_fedgnn_moving_average_value_and_its_gradient_to_the_fresh_embedding(mode, grad):
    """Eq. 5 for the rows being updated: (1 - γ)·old + γ·fresh, the others keep old. The gradient that
    reaches the fresh embedding is 1 (straight_through) or γ (scaled, the average's own derivative);
    rows not updated get none. Both modes share the value."""
    from types import SimpleNamespace

    from fgx.algorithms.ce_fedgnn import _ma

    gamma, old = 0.3, torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    c = SimpleNamespace(n_own=3, hbar=[old.clone()], hbar_init=[torch.ones(3, dtype=torch.bool)],
                        updated=[torch.zeros(3, dtype=torch.bool)])
    p = SimpleNamespace(embedding_sharing="ma", gamma=gamma, ma_init="first", grad_through_ma=mode)
    fresh = torch.tensor([[10.0, 20.0], [30.0, 40.0], [50.0, 60.0]], requires_grad=True)
    upd = torch.tensor([True, False, True])
    used = _ma(c, p, 0, fresh, upd, torch.arange(3), whole=True)
    want = torch.where(upd[:, None], (1 - gamma) * old + gamma * fresh.detach(), old)
    torch.testing.assert_close(used.detach(), want)
    torch.testing.assert_close(c.hbar[0], want)
    assert c.updated[0].tolist() == upd.tolist()
    used.sum().backward()
    torch.testing.assert_close(fresh.grad, upd[:, None].float().expand(3, 2) * grad)


def test_ce_fedgnn_edge_clients_pass_messages_over_their_cross_client_transactions(run_fgx, monkeypatch):
    """On the edge task every layer of a bank's graph holds its cross-bank transactions too (the halo
    accounts' embeddings are what CE-FedGNN shares): owned edges plus cross edges, some with a halo end."""
    from fgx.algorithms.ce_fedgnn import CEFedGNN

    seen = capture_setup(monkeypatch, CEFedGNN)
    run_fgx("dataset=aml_tiny", "dataset.scale=0.25", "partitioner.num_clients=2", "model.hidden=8",
            "algorithm=ce_fedgnn", "algorithm.local_steps=1", "algorithm.batch_size=16", "algorithm.fanouts=[3,3]",
            "rounds=1", "output.checkpoint=false")
    algo = seen["algo"]
    for c, cl in zip(algo.clients, algo.ctx.clients):
        d = cl.data
        assert d.cross_edge_index.size(1) > 0
        for ei in c.layer_edges:
            assert ei.size(1) == d.edge_index.size(1) + d.cross_edge_index.size(1)
            assert (ei >= c.n_own).any()            # edges with a halo account at one end


# ---- seed-3 sample ----------------------------------------------------------------------------------------

def test_sampled_training_builds_each_clients_neighbour_sampler_once(run_fgx, tiny_cfg, monkeypatch):
    """Minibatch training with fanouts keeps each client's NeighborSampler (its CSR of the client's
    graph) across steps and rounds instead of rebuilding it for every step."""
    import inspect

    import fgx.sampler

    built = []     # per sampler built: whether training (fgx.federation.client.sampled_forward) built it

    class Counting(fgx.sampler.NeighborSampler):
        def __init__(self, *a, **kw):
            # a substring: under mutmut the frame is the trampolined copy (`...sampled_forward__mutmut_orig`)
            built.append(any("sampled_forward" in f.function for f in inspect.stack(0)))
            super().__init__(*a, **kw)
    monkeypatch.setattr(fgx.sampler, "NeighborSampler", Counting)
    clients = [o for o in tiny_cfg if o.startswith("partitioner.num_clients=")]
    n_clients = int(clients[-1].split("=")[1]) if clients else None
    run_fgx(*tiny_cfg, "algorithm=fedavg", "algorithm.batch_size=16", "algorithm.fanouts=[3,3]",
            "algorithm.local_steps=4", "rounds=2", "eval_every=100")
    # at most one per client over its 4 steps x 2 rounds (a client with fewer than 16 training items
    # trains full batch, without a sampler)
    assert n_clients and 1 <= sum(built) <= n_clients


@pytest.mark.parametrize("mode,want", [("owner", {1.0}), ("half", {1.0}), ("full", {2.0})])
def test_ce_fedgnn_cross_bank_transaction_loss_weights_sum_over_its_two_banks(run_fgx, monkeypatch, mode, want):
    """algorithm.cross_edge_weight on the edge task: a cross-bank transaction is a training item of both
    banks; `owner` gives its loss to exactly one of them (fixed by its global id), `half` 0.5 to each,
    `full` 1 to each; a bank's own transactions weigh 1."""
    from collections import defaultdict

    from fgx.algorithms.ce_fedgnn import CEFedGNN

    seen = capture_setup(monkeypatch, CEFedGNN)
    run_fgx("dataset=aml_tiny", "dataset.scale=0.25", "partitioner.num_clients=2", "model.hidden=8",
            "algorithm=ce_fedgnn", "algorithm.local_steps=1", "algorithm.batch_size=16", "algorithm.fanouts=[3,3]",
            f"algorithm.cross_edge_weight={mode}", "rounds=1", "output.checkpoint=false")
    per_edge = defaultdict(list)
    for c, cl in zip(seen["algo"].clients, seen["algo"].ctx.clients):
        d = cl.data
        n_owned = d.global_edge_id.numel()
        w = c.item_weight.cpu()
        assert w[:n_owned].eq(1.0).all()
        for gid, wi in zip(d.cross_global_edge_id.tolist(), w[n_owned:].tolist()):
            per_edge[gid].append(wi)
    assert per_edge and all(len(ws) == 2 for ws in per_edge.values())
    assert {sum(ws) for ws in per_edge.values()} == want
    if mode == "owner":
        assert {tuple(sorted(ws)) for ws in per_edge.values()} == {(0.0, 1.0)}
        firsts = [ws[0] for ws in per_edge.values()]
        assert 0 < sum(firsts) < len(firsts)        # both banks own some of them
