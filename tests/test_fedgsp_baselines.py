"""FedGSP's baselines (issue #21): FedGNN, FedGTA, AdaFGL, FedTAD, FedIIH. Each method's defining
mechanism is checked inside a tiny run (recomputed from what crossed the channel) or on hand-made
inputs where the value is known; the model each needs comes with its preset."""
from __future__ import annotations

import json
import math

import pytest
import torch

from mechanisms import capture_setup


def _jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _metrics(run):
    return [(r["round"], r["split"], r["mean"]) for r in _jsonl(run / "metrics.jsonl")]


def _sent(recorded, kind):
    return [(p, src, dst, r) for k, p, src, dst, r in recorded["sent"] if k == kind]


# ---- the model each method needs is picked by its preset ------------------------------------------

@pytest.mark.parametrize("algo,model", [("fedgta", "gamlp"), ("fediih", "disengcn"), ("fedgnn", "gcn"),
                                        ("adafgl", "gcn"), ("fedtad", "gcn")])
def test_preset_brings_the_model(algo, model):
    from fgx.cli import compose

    assert compose([f"algorithm={algo}", "dataset=cora"]).model.name == model
    assert compose([f"algorithm={algo}", "dataset=cora", "model=sage"]).model.name == "sage"   # command line wins


# ---- FedGTA -----------------------------------------------------------------------------------------

def test_fedgta_aggregation_weights_follow_moments_and_confidence():
    from fgx.algorithms.fedgta import aggregation_weights

    m = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]])
    conf = torch.tensor([1.0, 3.0, 5.0])
    W = aggregation_weights(m, conf, accept_alpha=0.5)
    # clients 0 and 1 are alike (cos 0.99), client 2 is alone: weights ∝ confidence inside each set
    torch.testing.assert_close(W, torch.tensor([[0.25, 0.75, 0.0], [0.25, 0.75, 0.0], [0.0, 0.0, 1.0]]))


def test_fedgta_label_propagation_and_confidence():
    from fgx.algorithms.fedgta import label_propagation, moments, smoothing_confidence
    from fgx.models.gamlp import normalized_adjacency

    ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    adj = normalized_adjacency(ei, 3)
    y0 = torch.tensor([[1.0, 0.0], [0.5, 0.5], [0.5, 0.5]])
    train = torch.tensor([True, False, False])
    out = label_propagation(adj, y0, train, 1, 0.5)
    expected = 0.5 * torch.sparse.mm(adj, y0) + 0.5 * y0
    expected[0] += y0[0]                      # the training label is added back after each step
    torch.testing.assert_close(out, expected)
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    torch.testing.assert_close(moments(x, 2, "raw"), torch.tensor([[0.5, 0.5], [0.5, 0.5]]))
    assert moments(x, 3, "hybrid").shape == (6, 2)
    deg = torch.tensor([1.0, 2.0])
    sure, unsure = torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.full((2, 2), 0.5)
    assert float(smoothing_confidence(unsure, deg)) >= 0
    assert float(smoothing_confidence(sure, deg)) > float(smoothing_confidence(unsure, deg))


def test_fedgta_descriptor_is_topology_aware():
    """Same model, same nodes, other edges: other moments and another confidence."""
    from torch_geometric.data import Data

    from fgx.federation.client import ClientState
    from fgx.algorithms.fedgta import FedGTAParams, topology_descriptor
    from fgx.models.gamlp import GAMLP, GAMLPParams

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(40, 6, generator=g), torch.randint(0, 3, (40,), generator=g)
    train = torch.zeros(40, dtype=torch.bool)
    train[:10] = True
    ring = torch.stack([torch.arange(40), (torch.arange(40) + 1) % 40])
    rand = torch.randint(0, 40, (2, 60), generator=g)
    torch.manual_seed(0)
    model = GAMLP(GAMLPParams(hidden=8), 6, 3)
    out = []
    for ei in (ring, rand):
        view = Data(x=x, y=y, edge_index=torch.cat([ei, ei.flip(0)], 1), train_mask=train, num_nodes=40)
        out.append(topology_descriptor(ClientState(0, view, model, None, "node"), FedGTAParams()))
    assert not torch.allclose(out[0][0], out[1][0]) and float(out[0][1]) != float(out[1][1])


def test_fedgta_descriptor_reads_the_topology_through_label_propagation():
    """With a model that ignores the edges, only label propagation can carry the topology into the
    moments: another graph gives other moments, equal to those of the propagated labels."""
    from torch_geometric.data import Data

    from fgx.federation.client import ClientState
    from fgx.algorithms.fedgta import FedGTAParams, label_propagation, moments, topology_descriptor
    from fgx.models.gamlp import normalized_adjacency

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(40, 3, generator=g)

    class Fixed(torch.nn.Module):                     # the same soft labels whatever the graph
        def forward(self, view):
            return logits

    y, train = torch.randint(0, 3, (40,), generator=g), torch.zeros(40, dtype=torch.bool)
    train[:10] = True
    ring = torch.stack([torch.arange(40), (torch.arange(40) + 1) % 40])
    rand = torch.randint(0, 40, (2, 60), generator=g)
    out, p = [], FedGTAParams()
    for ei in (ring, rand):
        ei = torch.cat([ei, ei.flip(0)], 1)
        view = Data(x=torch.zeros(40, 1), y=y, edge_index=ei, train_mask=train, num_nodes=40)
        m, _ = topology_descriptor(ClientState(0, view, Fixed(), None, "node"), p)
        onehot = torch.nn.functional.one_hot(y, 3).float()
        y0 = torch.where(train[:, None], onehot, torch.softmax(logits, 1))
        lp = label_propagation(normalized_adjacency(ei, 40, 0.5), y0, train, p.lp_steps, p.lp_alpha)
        want = moments(torch.where(train[:, None], onehot, torch.softmax(lp, 1)), p.num_moments, p.moment_type)
        torch.testing.assert_close(m, want.flatten())
        out.append(m)
    assert not torch.allclose(out[0], out[1])


def test_fedgta_personalised_models_are_the_weighted_averages_in_a_run(recorded, run_fgx, tiny_cfg):
    from fgx.algorithms.fedgta import aggregation_weights

    run = run_fgx(*tiny_cfg, "algorithm=fedgta", "rounds=2")
    assert json.loads((run / "summary.json").read_text())["components"]["model"] == "gamlp"
    records = _jsonl(run / "fedgta_weights.jsonl")
    for r in (1, 2):
        thetas = {src: p for p, src, _, rr in _sent(recorded, "weights") if rr == r}
        m = torch.stack([p for p, src, _, rr in sorted(_sent(recorded, "lp_moments"), key=lambda t: t[1]) if rr == r])
        conf = torch.cat([p for p, src, _, rr in sorted(_sent(recorded, "smoothing_confidence"), key=lambda t: t[1])
                          if rr == r])
        W = aggregation_weights(m, conf, 0.5)
        torch.testing.assert_close(W, torch.tensor(records[r - 1]["W"]))
        for p, _, dst, rr in _sent(recorded, "personalised_weights"):
            if rr != r:
                continue
            for k, v in p.items():
                if v.is_floating_point():
                    torch.testing.assert_close(v, sum(W[dst, j] * thetas[j][k] for j in thetas))
    kinds = {k for k, *_ in recorded["sent"]}
    assert kinds == {"weights", "lp_moments", "smoothing_confidence", "personalised_weights"}


# ---- FedTAD -----------------------------------------------------------------------------------------

def test_fedtad_class_kd_loss_weights_each_client_class_by_its_reliability():
    from fgx.algorithms.fedtad import class_kd_loss, normalise_over_clients

    classes = torch.tensor([0, 0, 1, 1])
    g = torch.zeros(4, 2)
    l0, l1 = torch.ones(4, 2), torch.full((4, 2), 3.0)
    ckr = normalise_over_clients(torch.tensor([[3.0, 0.0], [1.0, 2.0]]))
    torch.testing.assert_close(ckr, torch.tensor([[0.75, 0.0], [0.25, 1.0]]))
    # client 0: class 0 only (0.75 * 1); client 1: 0.25 * 3 + 1.0 * 3
    assert float(class_kd_loss(g, [l0, l1], ckr, classes)) == pytest.approx(0.75 + 0.75 + 3.0)
    l0_changed = l0.clone()
    l0_changed[2:] = 100.0        # client 0 is not reliable for class 1: its class-1 logits do not count
    assert float(class_kd_loss(g, [l0_changed, l1], ckr, classes)) == pytest.approx(4.5)


def test_fedtad_class_reliability_counts_training_nodes_by_neighbourhood_agreement():
    from torch_geometric.data import Data

    from fgx.algorithms.fedtad import class_reliability

    x = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    ei = torch.tensor([[0, 1], [1, 0]])                 # nodes 0-1 linked, node 2 alone
    view = Data(x=x, y=torch.tensor([0, 0, 1]), edge_index=ei, train_mask=torch.tensor([True, False, True]),
                num_nodes=3)
    ckr = class_reliability(view, 2, walk_length=2)
    # node 0: (1 + cos(h0, h1)) / 2 = 1 (same features, same walk probabilities); node 2: 1 / 1
    torch.testing.assert_close(ckr, torch.tensor([1.0, 1.0]))


def test_fedtad_reliability_counts_the_topology_score():
    """Neighbours with equal features but different random-walk landing probabilities agree less than
    1: the CKR embeds [features | topology], not the features alone."""
    from torch_geometric.data import Data
    from torch_geometric.transforms import AddRandomWalkPE

    from fgx.algorithms.fedtad import class_reliability

    ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])     # a path 0 - 1 - 2, identical features
    view = Data(x=torch.ones(3, 2), y=torch.tensor([0, 1, 1]), edge_index=ei,
                train_mask=torch.tensor([True, False, False]), num_nodes=3)
    rw = AddRandomWalkPE(3, attr_name="rw")(Data(edge_index=ei, num_nodes=3)).rw
    h = torch.cat([view.x, rw], 1)
    want = (1 + torch.nn.functional.cosine_similarity(h[0], h[1], dim=0)) / 2
    ckr = class_reliability(view, 2, walk_length=3)
    assert float(ckr[0]) == pytest.approx(float(want)) and float(ckr[0]) < 0.999


def test_fedtad_distillation_weights_by_the_received_reliability(recorded, run_fgx, tiny_cfg, monkeypatch):
    """Every class-wise KD / semantic loss of the server uses the CKR the clients sent, normalised per
    class over the clients, not a uniform one."""
    from fgx.algorithms import fedtad

    used = []
    for name in ("class_kd_loss", "class_semantic_loss"):
        real = getattr(fedtad, name)
        monkeypatch.setattr(fedtad, name, lambda *a, _real=real: used.append(a[-2].clone()) or _real(*a))
    run_fgx(*tiny_cfg, "algorithm=fedtad", "algorithm.glb_epochs=1", "algorithm.num_gen=30", "rounds=1")
    sent = torch.stack([p for p, *_ in sorted(_sent(recorded, "class_reliability"), key=lambda t: t[1])])
    want = fedtad.normalise_over_clients(sent)
    assert used and not torch.allclose(want, want.mean(0, keepdim=True))      # the clients differ
    for ckr in used:
        torch.testing.assert_close(ckr, want)


def test_fedtad_distillation_moves_the_global_model(recorded, run_fgx, tiny_cfg):
    plain = run_fgx(*tiny_cfg, "algorithm=fedtad", "algorithm.glb_epochs=0", "rounds=2")
    avg = run_fgx(*tiny_cfg, "algorithm=fedavg", "algorithm.local_steps=3", "rounds=2")
    assert _metrics(plain) == _metrics(avg)                  # no distillation = FedAvg exactly
    run = run_fgx(*tiny_cfg, "algorithm=fedtad", "algorithm.glb_epochs=2", "algorithm.num_gen=30", "rounds=2",
                  "model.dropout=0.0")   # no dropout: the before/after losses compare like for like
    assert _metrics(run) != _metrics(avg)
    for row in _jsonl(run / "fedtad_distill.jsonl"):   # the global steps lower the class-wise KD loss
        assert row["kd_loss_after"] < row["kd_loss_before"]
    c = int(recorded["data"].y.max()) + 1
    ckr = _sent(recorded, "class_reliability")        # two FedTAD runs of 3 clients: once per client and run
    assert len(ckr) == 6 and all(r == 0 and p.shape == (c,) for p, _, _, r in ckr)


# ---- AdaFGL -----------------------------------------------------------------------------------------

def test_adafgl_two_steps_in_a_run(run_fgx, tiny_cfg):
    run = run_fgx(*tiny_cfg, "algorithm=adafgl", "algorithm.extractor_rounds=1", "rounds=3")
    comm = json.loads((run / "comm.json").read_text())["per_round"]
    assert set(comm["1"]) == {"global_weights", "update"}          # step 1: FedAvg
    assert set(comm["2"]) == {"knowledge_extractor"}              # the extractor, once
    assert "3" not in comm                                        # step 2 sends nothing
    (row,) = _jsonl(run / "adafgl_clients.jsonl")
    assert row["round"] == 2 and all(0.0 <= c["hcs"] <= 1.0 for c in row["clients"])
    # the personalised step changes the predictions after the switch
    val = [m["accuracy"] for r, split, m in _metrics(run) if split == "val"]
    assert len(val) == 3 and val[2] != val[0]


def test_adafgl_step_two_uses_the_extractors_soft_labels_and_the_knowledge_graph(recorded, run_fgx, tiny_cfg,
                                                                                   monkeypatch):
    """Step 2's soft labels P are the received extractor's softmax on the client's graph, and the
    features are smoothed over α·A + (1-α)·A_knowledge, the knowledge edges linking nodes whose P rows
    have cosine > 0.999."""
    from fgx.algorithms.adafgl import AdaFGL, similarity_matrix
    from fgx.algorithms.base import copy_model
    from fgx.models.gamlp import normalized_adjacency, propagate

    seen = capture_setup(monkeypatch, AdaFGL)
    run_fgx(*tiny_cfg, "algorithm=adafgl", "algorithm.extractor_rounds=1", "rounds=2")
    algo, p = seen["algo"], seen["algo"].params
    extractor = {dst: q for q, _, dst, _ in _sent(recorded, "knowledge_extractor")}
    edges = 0
    for s in algo.states:
        a, view = s.personal, s.view
        m = copy_model(s.model)
        m.load_state_dict(extractor[s.cid], strict=False)
        m.eval()
        with torch.no_grad():
            torch.testing.assert_close(a.soft, torch.softmax(m(view), 1))
        kn = (similarity_matrix(a.soft, probs=True) > p.knowledge_threshold).nonzero().t()
        own = view.edge_index
        mixed = normalized_adjacency(torch.cat([own, kn], 1), view.num_nodes, 0.5, weight=torch.cat(
            [torch.full((own.size(1),), p.alpha), torch.full((kn.size(1),), 1.0 - p.alpha)]))
        torch.testing.assert_close(a.smoothed, torch.cat(propagate(mixed, view.x.float(), p.prop_steps), 1))
        edges += kn.size(1)
    assert edges > 0                                   # the knowledge graph is not empty in this run


def test_adafgl_step_two_learns_from_the_extractor(run_fgx, tiny_cfg):
    """Step 2 with an untrained extractor differs from step 2 with a trained one."""
    a = run_fgx(*tiny_cfg, "algorithm=adafgl", "algorithm.extractor_rounds=0", "rounds=2")
    b = run_fgx(*tiny_cfg, "algorithm=adafgl", "algorithm.extractor_rounds=1", "rounds=2")
    assert _metrics(a)[-1] != _metrics(b)[-1]


def test_adafgl_hcs_fusion_and_losses():
    from fgx.algorithms.adafgl import fused_prediction, personal_loss

    soft = torch.tensor([[0.9, 0.1], [0.2, 0.8]])
    out = {"homo_smooth": torch.zeros(2, 2), "hete_local": torch.tensor([[5.0, 0.0], [0.0, 5.0]]),
           "hete_smooth": torch.zeros(2, 2), "hete_prop": torch.zeros(2, 2)}
    homo = (torch.full((2, 2), 0.5) + soft) / 2
    hete = sum(torch.softmax(out[h], 1) for h in ("hete_local", "hete_smooth", "hete_prop")) / 3
    torch.testing.assert_close(fused_prediction(out, soft, 0.3), 0.3 * homo + 0.7 * hete)
    only_homo = {"homo_smooth": out["homo_smooth"]}
    torch.testing.assert_close(fused_prediction(only_homo, soft, 0.3), homo)
    train, y = torch.tensor([True, False]), torch.tensor([0])
    # the homophilous loss pulls towards the extractor's soft labels (MSE): other soft labels, other loss
    other = torch.tensor([[0.5, 0.5], [0.5, 0.5]])
    assert float(personal_loss(only_homo, soft, train, y)) != float(personal_loss(only_homo, other, train, y))


def test_adafgl_homophily_confidence_reads_the_topology():
    from torch_geometric.data import Data

    from fgx.algorithms.adafgl import AdaFGLParams, homophily_confidence
    from fgx.models.gamlp import normalized_adjacency

    y = torch.tensor([0] * 10 + [1] * 10)
    same = torch.tensor([(i, j) for i in range(20) for j in range(20) if i != j and y[i] == y[j]]).t()
    cross = torch.tensor([(i, j) for i in range(20) for j in range(20) if y[i] != y[j]]).t()
    scores = []
    for ei in (same, cross):
        view = Data(x=torch.zeros(20, 1), y=y, edge_index=ei, train_mask=torch.ones(20, dtype=torch.bool),
                    num_nodes=20)
        adj = normalized_adjacency(ei, 20)
        scores.append(homophily_confidence(view, adj, 2, AdaFGLParams(), torch.Generator().manual_seed(0)))
    assert scores[0] == 1.0 and scores[1] < 0.5


@pytest.mark.parametrize("n_train", [0, 1])
def test_adafgl_homophily_confidence_without_two_training_nodes_is_the_even_mix(n_train):
    """Fewer than two training nodes cannot be split into propagation seeds and held-out nodes: HCS is
    0.5, both branches weigh the same (seed-5 mutation sample: 1.5, a mix outside [0, 1], survived)."""
    from torch_geometric.data import Data

    from fgx.algorithms.adafgl import AdaFGLParams, homophily_confidence
    from fgx.models.gamlp import normalized_adjacency

    ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    train = torch.zeros(3, dtype=torch.bool)
    train[:n_train] = True
    view = Data(x=torch.zeros(3, 1), y=torch.tensor([0, 1, 0]), edge_index=ei, train_mask=train, num_nodes=3)
    hcs = homophily_confidence(view, normalized_adjacency(ei, 3), 2, AdaFGLParams(), torch.Generator().manual_seed(0))
    assert hcs == 0.5


def test_adafgl_threshold_fusion_trains_one_branch(run_fgx, tiny_cfg):
    run = run_fgx(*tiny_cfg, "algorithm=adafgl", "algorithm.fusion=threshold", "algorithm.extractor_rounds=1",
                  "rounds=2")
    (row,) = _jsonl(run / "adafgl_clients.jsonl")
    for c in row["clients"]:
        assert c["branches"] == ("homophilous" if c["hcs"] >= 0.9 else "heterophilous")


# ---- FedIIH -----------------------------------------------------------------------------------------

def test_fediih_js_similarity_and_factor_weights():
    from fgx.algorithms.fediih import factor_weights, js_similarity

    mean = torch.tensor([[[0.0, 0.0]], [[0.0, 0.0]], [[5.0, 5.0]]])     # [M=3, K=1, d=2]
    logvar = torch.zeros(3, 1, 2)
    S = js_similarity(mean, logvar)
    assert S.shape == (1, 3, 3)
    torch.testing.assert_close(S[0].diagonal(), torch.ones(3))
    assert float(S[0, 0, 1]) == pytest.approx(1.0)
    # N(0, I) vs N(5·1, I): midpoint N(2.5·1, I), KL = 2.5²/2 per dimension, summed over the 2 dimensions
    assert float(S[0, 0, 2]) == pytest.approx(1.0 - 2 * 3.125 / math.log(2.0), rel=1e-5)
    # one differing dimension of two: the JS is summed over dimensions, not averaged (FedGB's gaussian_js)
    S1 = js_similarity(torch.tensor([[[0.0, 0.0]], [[1.0, 0.0]]]), torch.zeros(2, 1, 2))
    assert float(S1[0, 0, 1]) == pytest.approx(1.0 - 0.125 / math.log(2.0), rel=1e-5)
    torch.testing.assert_close(S, S.transpose(1, 2))
    W = factor_weights(S, 10.0)
    torch.testing.assert_close(W.sum(-1), torch.ones(1, 3))
    assert float(W[0, 0, 1]) > float(W[0, 0, 2])


def test_fediih_aggregates_each_factor_with_its_own_weights():
    from fgx.algorithms.fediih import personalised_state

    thetas = [{"project.weight": torch.full((4, 3), float(j)), "classifier.bias": torch.full((2,), float(j))}
              for j in range(2)]
    W = torch.tensor([[[1.0, 0.0], [0.0, 1.0]],      # factor 0: each client keeps its own
                      [[0.5, 0.5], [0.5, 0.5]]])     # factor 1: plain average
    out = personalised_state(0, thetas, W, {"project.weight": 0})
    torch.testing.assert_close(out["project.weight"][:2], torch.zeros(2, 3))          # factor 0 rows
    torch.testing.assert_close(out["project.weight"][2:], torch.full((2, 3), 0.5))    # factor 1 rows
    torch.testing.assert_close(out["classifier.bias"], torch.full((2,), 0.25))        # mean of W^k rows


def test_fediih_run_aggregates_by_the_descriptors_it_received(recorded, run_fgx, tiny_cfg):
    from fgx.algorithms.fediih import factor_weights, js_similarity, personalised_state

    run = run_fgx(*tiny_cfg, "algorithm=fediih", "rounds=1")
    assert json.loads((run / "summary.json").read_text())["components"]["model"] == "disengcn"
    desc = sorted(_sent(recorded, "latent_descriptor"), key=lambda t: t[1])
    thetas = [p for p, *_ in sorted(_sent(recorded, "weights"), key=lambda t: t[1])]
    S = js_similarity(torch.stack([d["mean"] for d, *_ in desc]), torch.stack([d["logvar"] for d, *_ in desc]))
    W = factor_weights(S, 10.0)
    (rec,) = _jsonl(run / "fediih_weights.jsonl")
    torch.testing.assert_close(W, torch.tensor(rec["W"]))
    # the diagnostic in metrics.jsonl: the weights' spread around uniform and their effective client count
    row = _jsonl(run / "metrics.jsonl")[0]
    assert row["agg_weight_min_x_uniform"] == pytest.approx(float(W.min()) * len(thetas), rel=1e-5)
    assert row["agg_weight_max_x_uniform"] == pytest.approx(float(W.max()) * len(thetas), rel=1e-5)
    assert row["agg_effective_clients"] == pytest.approx(float((1 / W.double().pow(2).sum(-1)).mean()), rel=1e-5)
    slices = {"project.weight": 0, "project.bias": 0, "classifier.weight": 1, "heads.weight": 0, "heads.bias": 0}
    for p, _, dst, _ in _sent(recorded, "personalised_weights"):
        want = personalised_state(dst, thetas, W, slices)
        for k in want:
            torch.testing.assert_close(p[k], want[k])
    (prior, *_), = _sent(recorded, "global_prior")[:1]
    torch.testing.assert_close(prior, torch.stack([d["mean"] for d, *_ in desc]).sum(0) / (len(desc) + 1))


def _fediih_formula(mean, logvar, tau):
    """FedIIH's aggregation weights computed independently (numpy, loops): per factor k,
    S_ij = 1 − JS(N(μ_i, σ_i²) ‖ N(μ_j, σ_j²)) / ln 2 with the JS through the midpoint Gaussian summed over
    dimensions, W_ij = exp(τ·S_ij) / Σ_l exp(τ·S_il) (FedGB fediih/utils.py js_similarity_matrix)."""
    import numpy as np

    mean, logvar = np.asarray(mean, dtype=float), np.asarray(logvar, dtype=float)
    M, K, _ = mean.shape
    W = np.zeros((K, M, M))
    for k in range(K):
        S = np.zeros((M, M))
        for i in range(M):
            for j in range(M):
                va, vb = np.exp(logvar[i, k]), np.exp(logvar[j, k])
                mm, vm = (mean[i, k] + mean[j, k]) / 2, (va + vb) / 2
                kl_a = 0.5 * np.sum(np.log(vm / va) + (va + (mean[i, k] - mm) ** 2) / vm - 1)
                kl_b = 0.5 * np.sum(np.log(vm / vb) + (vb + (mean[j, k] - mm) ** 2) / vm - 1)
                S[i, j] = 1 - 0.5 * (kl_a + kl_b) / np.log(2)
        E = np.exp(tau * S)
        W[k] = E / E.sum(1, keepdims=True)
    return W


def test_fediih_weights_equal_the_formula_on_descriptors_that_differ():
    """A toy case whose weights are neither uniform nor the identity: four clients, two factors, factor 0
    with two pairs of close clients, factor 1 with one outlier and a variance that differs."""
    import numpy as np

    from fgx.algorithms.fediih import factor_weights, js_similarity

    mean = np.array([[[0.0, 0.0, 0.0], [0.0, 0.1, 0.0]],
                     [[0.1, 0.0, 0.0], [0.0, 0.0, 0.1]],
                     [[0.6, 0.2, 0.0], [0.1, 0.1, 0.0]],
                     [[0.6, 0.3, 0.1], [0.9, 0.0, 0.4]]])             # [M=4, K=2, d=3]
    logvar = np.log(np.array([[[0.1, 0.1, 0.1], [0.2, 0.2, 0.2]],
                              [[0.1, 0.1, 0.1], [0.2, 0.2, 0.2]],
                              [[0.1, 0.1, 0.1], [0.2, 0.4, 0.2]],
                              [[0.1, 0.1, 0.1], [0.2, 0.2, 0.2]]]))
    want = _fediih_formula(mean, logvar, 10.0)
    got = factor_weights(js_similarity(torch.tensor(mean, dtype=torch.float32),
                                       torch.tensor(logvar, dtype=torch.float32)), 10.0)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-6)
    # the setting is one where the formula's weights differ from both uniform and own-model-only
    assert 0.3 < want[0].max() < 0.9 and want.min() < 0.05
    assert want[0, 0, 1] > 0.2 and want[0, 0, 2] < 0.05 and want[1, 3, 3] > 0.9


def test_fediih_weights_on_a_cora_run_equal_the_formula_on_its_descriptors(recorded, run_fgx, data_root):
    """Cora (Louvain, 10 clients), two rounds: each round's W in fediih_weights.jsonl and every personalised
    model equal the formula recomputed independently from the descriptors the clients sent."""
    import numpy as np

    from fgx.algorithms.fediih import personalised_state

    run = run_fgx("algorithm=fediih", "dataset=cora", f"data_dir={data_root}", "rounds=2", "eval_every=2",
                  "output.checkpoint=false")
    recs = _jsonl(run / "fediih_weights.jsonl")
    slices = {"project.weight": 0, "project.bias": 0, "classifier.weight": 1, "heads.weight": 0, "heads.bias": 0}
    for r, rec in enumerate(recs, start=1):
        desc = sorted([t for t in _sent(recorded, "latent_descriptor") if t[3] == r], key=lambda t: t[1])
        thetas = [p for p, *_ in sorted([t for t in _sent(recorded, "weights") if t[3] == r], key=lambda t: t[1])]
        mean = np.stack([d["mean"].double().numpy() for d, *_ in desc])
        want = _fediih_formula(mean, np.stack([d["logvar"].double().numpy() for d, *_ in desc]), 10.0)
        assert len(desc) == 10 and np.abs(mean - mean.mean(0)).max() > 1e-3       # the descriptors differ
        np.testing.assert_allclose(np.array(rec["W"]), want, rtol=1e-4, atol=1e-6)
        for p, _, dst, _ in [t for t in _sent(recorded, "personalised_weights") if t[3] == r]:
            agg = personalised_state(dst, thetas, torch.tensor(want, dtype=torch.float32), slices)
            for k in agg:
                torch.testing.assert_close(p[k], agg[k], rtol=1e-4, atol=1e-5)


def test_fediih_variance_heads_learn_only_through_the_vgae_term(recorded, run_fgx, tiny_cfg):
    """log σ² comes from the variance heads, which only the negative ELBO trains: with the VGAE term
    they move from their initial zeros in the first round, with vgae_weight=0 they stay there."""
    def heads_after_round_1(*extra):
        recorded["sent"].clear()
        run_fgx(*tiny_cfg, "algorithm=fediih", "rounds=1", *extra)
        return [q["heads.weight"] for q, *_ in _sent(recorded, "weights")]

    assert all(float(w.abs().max()) > 1e-4 for w in heads_after_round_1())
    assert all(float(w.abs().max()) == 0.0 for w in heads_after_round_1("algorithm.vgae_weight=0"))


def test_fediih_refuses_other_models(run_fgx, tiny_cfg):
    with pytest.raises(SystemExit, match="disengcn"):
        run_fgx(*tiny_cfg, "algorithm=fediih", "model=gcn")


def test_disengcn_routing_keeps_unit_factors():
    from fgx.models.disengcn import route

    x = torch.randn(6, 8)
    ei = torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]])
    out = route(x, torch.cat([ei, ei.flip(0)], 1), factors=2, iterations=3, tau=1.0).view(6, 2, 4)
    torch.testing.assert_close(out.norm(dim=2), torch.ones(6, 2))


# ---- FedGNN -----------------------------------------------------------------------------------------

def test_fedgnn_match_attaches_remote_nodes_to_their_shared_neighbour():
    from fgx.algorithms.fedgnn import match

    # client 0 owns ids 10, 11; client 1 owns 20, 21 (20 ~ 10, 21 ~ 10 and 11); client 2 owns 11 too
    up0 = {"self": torch.tensor([10, 11]), "neighbours": torch.tensor([[0, 1], [11, 10]])}
    up1 = {"self": torch.tensor([20, 21]), "neighbours": torch.tensor([[0, 1, 1], [10, 10, 11]])}
    up2 = {"self": torch.tensor([11]), "neighbours": torch.tensor([[0], [10]])}
    (rows0, src0), (rows1, src1), (rows2, src2) = match([up0, up1, up2], cap=None)
    # client 0: its 10 gets 20 and 21, its 11 gets 21; client 2's copy of 11 (10's neighbour) is skipped
    # because client 0 owns 11 itself
    assert list(zip(rows0.tolist(), src0)) == [(0, (1, 0)), (0, (1, 1)), (1, (1, 1))]
    assert rows1.numel() == 0                                   # nobody lists 20 or 21 as a neighbour
    assert list(zip(rows2.tolist(), src2)) == [(0, (0, 0)), (0, (1, 1))]   # client 2's 11 gets 10 and 21
    (rows0, src0), *_ = match([up0, up1, up2], cap=1)
    assert list(zip(rows0.tolist(), src0)) == [(0, (1, 0)), (1, (1, 1))]


def test_fedgnn_expansion_recovers_the_cut_edges_with_the_owners_embeddings(recorded, run_fgx, tiny_cfg):
    """Client i receives, for each owned node n, exactly the nodes w of other clients with an edge w-n
    in the global graph (computed here from the global graph), each carrying the layer-1 embedding
    w's owner uploaded; the server saw tokens, not ids."""
    run = run_fgx(*tiny_cfg, "algorithm=fedgnn", "rounds=1")
    data, clients = recorded["data"], recorded["clients"]
    ei = data.edge_index
    owner = {int(v): c.cid for c in clients for v in c.nodes}
    uploads = {src: p for p, src, _, _ in _sent(recorded, "node_embeddings")}
    for p, _, dst, _ in _sent(recorded, "expanded_neighbours"):
        c = clients[dst]
        mine = {int(v) for v in c.nodes}
        want = sorted((int(n), int(w)) for w, n in ei.t().tolist() if n in mine and w not in mine)
        got = []
        for row, e in zip(p["nodes"].tolist(), p["embeddings"]):
            n = int(c.nodes[row])
            senders = [(j, int(clients[j].nodes[w])) for j, up in uploads.items() if j != dst
                       for w in range(up.size(0)) if torch.equal(up[w], e)]
            assert any((n, w) in want and owner[w] == j for j, w in senders), (n, senders)
            got.append(n)
        assert sorted(got) == sorted(n for n, _ in want)
    tok = torch.cat([p["self"] for p, *_ in _sent(recorded, "id_tokens")])
    assert not set(tok.tolist()) & set(range(data.num_nodes))     # tokens are not the raw global ids
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"


def test_fedgnn_expanded_forward_without_expansion_is_the_model():
    from torch_geometric.data import Data

    from fgx.algorithms.fedgnn import expanded_forward
    from fgx.models.base import GNNParams
    from fgx.models.gcn import build_gcn

    torch.manual_seed(0)
    model = build_gcn(GNNParams(hidden=8), 5, 3, None).eval()
    ei = torch.tensor([[0, 1, 2], [1, 2, 3]])
    view = Data(x=torch.randn(4, 5), edge_index=torch.cat([ei, ei.flip(0)], 1), num_nodes=4)
    torch.testing.assert_close(expanded_forward(model, view, None, 1), model(view))
    exp = {"nodes": torch.tensor([0]), "embeddings": torch.ones(1, 8)}
    assert not torch.allclose(expanded_forward(model, view, exp, 1), model(view))


# ---- resume -----------------------------------------------------------------------------------------

@pytest.mark.slow   # resume is checked in the default suite by test_run, test_reliability (SIGKILL), test_fedgsp and test_eval_model
@pytest.mark.parametrize("algo,extra", [("fedgnn", []), ("fedgta", []), ("adafgl", ["algorithm.extractor_rounds=1"]),
                                        ("fedtad", ["algorithm.glb_epochs=1", "algorithm.num_gen=20"]),
                                        ("fediih", [])])
def test_resume_gives_the_same_metrics(algo, extra, run_fgx, tiny_cfg):
    """A run stopped after round 2 and resumed ends where an uninterrupted run ends (AdaFGL across its
    switch to step 2; the checkpoints hold each method's server and client state)."""
    from fgx.cli import main

    args = [*tiny_cfg, f"algorithm={algo}", *extra]
    full = _metrics(run_fgx(*args, "rounds=3"))
    part = run_fgx(*args, "rounds=2")
    assert main(["run", *args, "rounds=3", "resume=true", f"hydra.run.dir={part}"]) == 0
    assert _metrics(part) == full


# ---- pieces the runs above do not pin down (from mutation testing, docs/testing.md) -------------------

def test_fediih_kl_term_is_the_gaussian_kl_plus_half_the_prior_variance():
    from torch.distributions import Normal, kl_divergence

    from fgx.algorithms.fediih import gaussian_kl

    g = torch.Generator().manual_seed(0)
    mu_q, logvar_q, mu_p = (torch.randn(5, 3, generator=g, dtype=torch.float64) for _ in range(3))
    want = kl_divergence(Normal(mu_q, (0.5 * logvar_q).exp()), Normal(mu_p, torch.ones_like(mu_p)))
    torch.testing.assert_close(gaussian_kl(mu_q, logvar_q, mu_p), want)
    torch.testing.assert_close(gaussian_kl(mu_q, logvar_q, mu_p, 0.3), want + 0.15)


def test_fedtad_pseudo_node_classes_put_the_remainder_in_the_last_class():
    from fgx.algorithms.fedtad import balanced_classes

    assert torch.bincount(balanced_classes(11, 3)).tolist() == [3, 3, 5]
    assert torch.bincount(balanced_classes(9, 3)).tolist() == [3, 3, 3]


def test_fedtad_generator_minimises_semantic_minus_kd_plus_diversity(run_fgx, tiny_cfg, monkeypatch):
    """The generator's loss is lam1·semantic - KD + lam2·(clients)·diversity: with each term replaced by a
    known constant (gradients still flowing), the recorded generator loss is that sum."""
    import fgx.algorithms.fedtad as fedtad

    monkeypatch.setattr(fedtad, "class_semantic_loss", lambda logits, ckr, classes: sum(l.sum() for l in logits) * 0 + 2.0)
    monkeypatch.setattr(fedtad, "class_kd_loss", lambda g, logits, ckr, classes: g.sum() * 0 + 1.0)
    monkeypatch.setattr(fedtad, "diversity_loss", lambda z, x: x.sum() * 0 + 5.0)
    run = run_fgx(*tiny_cfg, "algorithm=fedtad", "algorithm.glb_epochs=1", "algorithm.num_gen=20", "rounds=1",
                  "algorithm.lam1=0.5", "algorithm.lam2=0.25")
    (row,) = _jsonl(run / "fedtad_distill.jsonl")
    assert row["generator_loss"] == pytest.approx(0.5 * 2.0 - 1.0 + 0.25 * 3 * 5.0)     # 3 clients


def test_fediih_refuses_mini_batches_naming_the_key(run_fgx, tiny_cfg):
    with pytest.raises(SystemExit, match=r"algorithm\.batch_size=8 .*FedIIH trains full batch"):
        run_fgx(*tiny_cfg, "algorithm=fediih", "algorithm.batch_size=8")


def test_fedgnn_refuses_a_share_layer_the_model_does_not_have(run_fgx, tiny_cfg, capsys):
    run_fgx(*tiny_cfg, "algorithm=fedgnn", "algorithm.share_layer=2", "model.layers=2", expect_rc=2)
    err = capsys.readouterr().err
    assert "algorithm.share_layer=2" in err and "message-passing layers (2)" in err


def test_fedgnn_minibatches_come_from_each_clients_own_generator(run_fgx, tiny_cfg, monkeypatch):
    """A FedGNN client draws its minibatches from its own generator (round seed + client id), so they
    do not depend on how much of the global random stream the model's dropout used (seed-4 mutation
    sample: drawing them from the global stream survived every test)."""
    drawn = []
    randperm = torch.randperm

    def recording(n, *a, **kw):
        out = randperm(n, *a, **kw)
        drawn.append(out.tolist())
        return out
    monkeypatch.setattr(torch, "randperm", recording)

    def batches(dropout):
        drawn.clear()
        run_fgx(*tiny_cfg, "algorithm=fedgnn", "algorithm.batch_size=16", "algorithm.local_steps=2", "rounds=1",
                "eval_every=1", f"model.dropout={dropout}")
        return list(drawn)

    without, with_dropout = batches(0.0), batches(0.5)
    assert without and without == with_dropout


def test_fedgnn_local_epochs_walk_each_clients_training_nodes_in_batches(run_fgx, tiny_cfg, monkeypatch):
    """With local_epochs, a FedGNN client takes ceil(n_train / batch_size) steps per epoch over its own
    training nodes (seed-5 mutation sample: one step per epoch, and no step at all, both survived)."""
    import fgx.algorithms.fedgnn as fedgnn
    import fgx.federation.client as runtime

    calls = []                                   # one [training nodes, training forwards] per client call
    real_targets, real_forward = runtime.targets, fedgnn.expanded_forward

    def targets(view, task, split):
        mask, y = real_targets(view, task, split)
        if split == "train":
            calls.append([int(mask.sum()), 0])
        return mask, y

    def forward(model, *a, **kw):
        if model.training:                       # evaluation's forwards are not steps
            calls[-1][1] += 1
        return real_forward(model, *a, **kw)
    monkeypatch.setattr(runtime, "targets", targets)         # the client runtime's loop reads the training items
    monkeypatch.setattr(fedgnn, "expanded_forward", forward)
    run_fgx(*tiny_cfg, "algorithm=fedgnn", "algorithm.local_epochs=2", "algorithm.batch_size=8", "rounds=1",
            "eval_every=1")
    trained = [(n, f) for n, f in calls if n]
    assert trained and any(n > 8 for n, _ in trained)
    assert [f for _, f in trained] == [2 * -(-n // 8) for n, _ in trained]
