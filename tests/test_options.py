"""Each non-default choice of an algorithm option does what its name says (the seed-3 mutation sample
found `cross_edge_weight=owner` broken where no test had ever chosen it; these are the other choices no
test chose). Small direct checks of the values each choice produces."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from mechanisms import capture_setup


def test_fedgta_central_moments_are_about_the_class_mean_and_hybrid_is_raw_then_central():
    from fgx.algorithms.fedgta import moments

    g = torch.Generator().manual_seed(0)
    x = torch.rand(50, 3, generator=g, dtype=torch.float64)
    central = moments(x, 3, "central")
    d = x - x.mean(0)
    torch.testing.assert_close(central, torch.stack([d.mean(0), d.pow(2).mean(0), d.pow(3).mean(0)]))
    assert central[0].abs().max() < 1e-12                    # the first central moment is 0
    torch.testing.assert_close(moments(x, 3, "hybrid"), torch.cat([moments(x, 3, "raw"), central]))


def test_fedgsp_squared_distance_similarity_weighs_descriptor_distances():
    """similarity=sq_distance: T_ij = β‖r⊙p_i − r⊙p_j‖² − α‖s⊙q_i − s⊙q_j‖² instead of the angles."""
    from fgx.algorithms.fedgsp import FedGSPParams, inverse_weighting, laplacian, optimise_graph, w_update

    g = torch.Generator().manual_seed(2)
    m, k, f = 5, 2, 3
    p_desc = torch.randn(m, k * f, generator=g, dtype=torch.float64)
    q_desc = torch.randn(m, k * f, generator=g, dtype=torch.float64)
    w0 = torch.rand(m, m, generator=g, dtype=torch.float64).fill_diagonal_(0)
    params = FedGSPParams(similarity="sq_distance")
    w, _, _ = optimise_graph(w0, torch.zeros(m, dtype=torch.float64), p_desc, q_desc, k, params)
    lap = laplacian(w0)
    rp = p_desc * inverse_weighting(p_desc, lap, params.rs_scale)
    sq = q_desc * inverse_weighting(q_desc, lap, params.rs_scale)
    dist = lambda a: ((a[:, None, :] - a[None, :, :]) ** 2).sum(-1)      # noqa: E731
    t = params.beta * dist(rp) - params.alpha * dist(sq)
    torch.testing.assert_close(w, w_update(t, params.gamma, torch.zeros(m, dtype=torch.float64), params.w_solver)[0])


@pytest.mark.parametrize("init", ["first", "zeros"])
def test_ce_fedgnn_moving_average_starts_from_the_first_value_or_from_zero(init):
    """ma_init: a node's first update is its fresh value (first) or γ·fresh, an average started at 0 (zeros)."""
    from fgx.algorithms.ce_fedgnn import _ma

    gamma, fresh = 0.25, torch.tensor([[4.0, 8.0], [2.0, 6.0]])
    c = SimpleNamespace(n_own=2, hbar=[None], hbar_init=[None], updated=[torch.zeros(2, dtype=torch.bool)])
    p = SimpleNamespace(embedding_sharing="ma", gamma=gamma, ma_init=init, grad_through_ma="straight_through")
    used = _ma(c, p, 0, fresh, torch.tensor([True, True]), torch.arange(2), whole=True)
    torch.testing.assert_close(used.detach(), fresh if init == "first" else gamma * fresh)


@pytest.mark.parametrize("layer0,uses", [("drop", [False, True]), ("zeros", [True, True])])
def test_ce_fedgnn_remote_layer0_drop_or_zeros(run_fgx, tiny_cfg, monkeypatch, layer0, uses):
    """remote_layer0 on the node task: `drop` passes no message from a halo node at layer 0; `zeros`
    passes them with the halo node's features set to 0 (its degree still counts). Later layers use the
    shared embeddings either way."""
    from fgx.algorithms.ce_fedgnn import CEFedGNN

    seen = capture_setup(monkeypatch, CEFedGNN)
    run_fgx(*tiny_cfg, "algorithm=ce_fedgnn", f"algorithm.remote_layer0={layer0}", "rounds=1", "model.layers=2")
    for c in seen["algo"].clients:
        assert c.layer_uses_cross == uses
        n0, n1 = c.layer_edges[0].size(1), c.layer_edges[1].size(1)
        assert n0 == n1 if layer0 == "zeros" else n0 < n1


def test_ce_fedgnn_gradient_estimator_starts_from_the_first_gradient_or_from_zero(run_fgx, tiny_cfg, monkeypatch):
    """grad_init: after the first local step G is the gradient itself (first) or β·gradient, an EMA
    started at 0 (zeros); with ema_sgd the first step moves the weights by lr·G."""
    from fgx.algorithms.ce_fedgnn import CEFedGNN

    def first_step(init, lr):
        seen = capture_setup(monkeypatch, CEFedGNN)
        run_fgx(*tiny_cfg, "algorithm=ce_fedgnn", f"algorithm.grad_init={init}", "algorithm.local_steps=1",
                "algorithm.local_optimizer=ema_sgd", f"algorithm.lr={lr}", "algorithm.beta=0.2",
                "algorithm.weight_decay=0", "model.dropout=0.0", "rounds=1")
        return seen["algo"].clients[0].model.state_dict()

    w0 = first_step("zeros", 1e-30)          # lr > 0 is required; this one leaves the weights as they were
    zeros, first = first_step("zeros", 0.1), first_step("first", 0.1)
    moved = [k for k in w0 if w0[k].is_floating_point() and (w0[k] - zeros[k]).abs().max() > 1e-8]
    assert moved
    for k in moved:
        torch.testing.assert_close(w0[k] - first[k], (w0[k] - zeros[k]) / 0.2, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("scale,want", [("none", 0.01), ("feature_l1_mean", 0.01 * 3.5),
                                        ("inv_sqrt_n_nt", 0.01 / (400 * 100) ** 0.5)])
def test_certified_lr_residue_threshold_scales(scale, want):
    from fgx.algorithms.certified_lr import effective_r_max

    assert effective_r_max(0.01, scale, 400, 100, 3.5) == pytest.approx(want)


@pytest.mark.parametrize("name,cls", [("adam", torch.optim.Adam), ("rmsprop", torch.optim.RMSprop),
                                      ("sgd", torch.optim.SGD)])
def test_graph_ranker_optimizer_choice(name, cls):
    """optimizer of LPSFed's and FedSSP's graph rankers: the named torch optimiser, with lr and weight decay."""
    from fgx.recsys.graph_clients import make_optimizer

    opt = make_optimizer(name, [torch.nn.Parameter(torch.zeros(2))], 0.03, 1e-4)
    assert type(opt) is cls and opt.defaults["lr"] == 0.03 and opt.defaults["weight_decay"] == 1e-4


def test_unifilter_homophily_estimate_from_training_edges_the_reference_codes_id_range_or_all_labels():
    """homophily_estimate: ĥ over edges between training nodes (train_edges); over edges between nodes
    0..#train-1, the reference code's loop (code_bug); over every edge with every label (oracle)."""
    from torch_geometric.data import Data

    from fgx.models.unifilter import estimate_homophily

    # nodes 0-3 are all of one label and joined; the training nodes 4-7 alternate labels along a path
    y = torch.tensor([0, 0, 0, 0, 0, 1, 0, 1])
    ei = torch.tensor([[0, 1, 2, 4, 5, 6, 3], [1, 2, 3, 5, 6, 7, 4]])
    ei = torch.cat([ei, ei.flip(0)], 1)
    train = torch.tensor([False] * 4 + [True] * 4)
    view = Data(y=y, edge_index=ei, train_mask=train, num_nodes=8)
    assert estimate_homophily(view, "train_edges") == 0.0      # 4-5, 5-6, 6-7: all differ
    assert estimate_homophily(view, "code_bug") == 1.0         # nodes 0-3: 0-1, 1-2, 2-3, all the same
    assert estimate_homophily(view, "oracle") == pytest.approx(4 / 7)


def test_unifilter_sole_combination_has_one_coefficient_per_order_for_every_channel():
    """comb=sole: the K+1 bases are combined with one coefficient per order (shared by all channels);
    per_channel: one per order and channel."""
    from fgx.models.unifilter import UniFilter, UniFilterParams

    for comb, width in (("sole", 1), ("per_channel", 6)):
        m = UniFilter(UniFilterParams(K=3, comb=comb), 6, 2)
        assert m.comb_weight.shape == (1, 4, width)
