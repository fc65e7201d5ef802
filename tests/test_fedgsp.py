"""FedGSP pieces: Algorithm 1's angle property, the W update (Newton = simplex projection, rows on
the simplex), R/S on the simplex, homophily measures on hand-made graphs, overlapping METIS, and a
one-round run on a tiny generated graph."""
from __future__ import annotations

import json
import math

import pytest
import torch

from fgx.algorithms.fedgsp import (inverse_weighting, vertex_weighting, laplacian, newton_rows, optimise_graph,
                                   personalised_average, similarity_matrix, simplex_projection, w_update, FedGSPParams)
from fgx.homophily import adjusted_homophily, edge_homophily, node_homophily
from fgx.models.unifilter import propagation_matrix, unifilter_bases


def _graph(n=120, p=0.06, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = (torch.rand(n, n, generator=g) < p).triu(1)
    ei = a.nonzero().T
    return torch.cat([ei, ei.flip(0)], 1), torch.rand(n, 8, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("variant", ["appendix", "column"])
@pytest.mark.parametrize("hhat", [0.0, 0.2, 0.5, 0.9])
def test_heterophily_bases_keep_the_angle(variant, hhat):
    ei, x = _graph()
    lp = propagation_matrix(ei, x.size(0))
    _, het, _ = unifilter_bases(x, lp, 5, hhat, 0.5, variant)
    cos = math.cos(math.pi / 2 * (1 - hhat))
    for i in range(len(het)):
        for j in range(i + 1, len(het)):
            if variant == "appendix":
                assert float((het[i] * het[j]).sum()) == pytest.approx(cos, abs=1e-6)
                assert float(het[j].norm()) == pytest.approx(1.0, abs=1e-9)
            else:   # every feature channel is its own signal
                torch.testing.assert_close((het[i] * het[j]).sum(0), torch.full((8,), cos, dtype=torch.float64),
                                           atol=1e-6, rtol=0)


@pytest.mark.parametrize("variant", ["code", "appendix", "column"])
def test_zero_homophily_is_the_limit_of_small_homophily(variant):
    """ĥ = 0 gives the limit U^k = V^k (orthogonal bases), not collapsed ones (issue #21): the bases at
    ĥ = 0 equal those at a tiny positive ĥ, and no two are parallel."""
    ei, x = _graph()
    lp = propagation_matrix(ei, x.size(0))
    _, het0, _ = unifilter_bases(x, lp, 4, 0.0, 0.5, variant)
    _, het_eps, _ = unifilter_bases(x, lp, 4, 1e-9, 0.5, variant)
    for a, b in zip(het0, het_eps):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
    per_col = variant != "appendix"
    for i in range(1, len(het0)):
        for j in range(i + 1, len(het0)):
            dot = (het0[i] * het0[j]).sum(0) if per_col else (het0[i] * het0[j]).sum()
            assert float(dot.abs().max()) < 1e-6


def test_code_variant_mixes_homophily_basis_with_tau():
    ei, x = _graph()
    lp = propagation_matrix(ei, x.size(0))
    hom, het, mixed = unifilter_bases(x, lp, 3, 0.7, 0.9, "code")
    torch.testing.assert_close(hom[0], lp @ x)
    torch.testing.assert_close(mixed[2], 0.9 * hom[1] + 0.1 * het[2])
    assert torch.equal(mixed[0], x)


def test_unifilter_mlp_follows_the_reference_dense_layers():
    from fgx.models.unifilter import UniFilter, UniFilterParams

    torch.manual_seed(0)
    m = UniFilter(UniFilterParams(K=2, hidden=64, n_layers=3, dropout_mlp=0.5), in_dim=400, out_dim=4)
    for lin in m.mlp:   # Dense.reset_parameters: U(-1/sqrt(out), 1/sqrt(out)), not nn.Linear's 1/sqrt(in)
        bound = 1 / math.sqrt(lin.out_features)
        assert lin.weight.abs().max() <= bound and lin.weight.abs().max() > 0.9 * bound
    # the residual of a square layer adds the dropped-out input, as Dense.forward does
    m.train()
    h = torch.randn(32, 64)
    torch.manual_seed(1)
    out, _ = m.layer(1, h, None, None)
    torch.manual_seed(1)
    dropped = torch.nn.functional.dropout(h, 0.5, True)
    assert torch.allclose(out, m.mlp[1](dropped) + dropped)
    torch_init = UniFilter(UniFilterParams(K=2, hidden=64, n_layers=3, mlp_init="torch"), in_dim=400, out_dim=4)
    assert torch_init.mlp[0].weight.abs().max() <= 1 / math.sqrt(400)


@pytest.mark.parametrize("seed", range(20))
def test_newton_equals_simplex_projection(seed):
    g = torch.Generator().manual_seed(seed)
    m = 3 + seed % 9
    t = torch.randn(m, m, generator=g, dtype=torch.float64) * (0.1 + seed)
    gamma = 0.3 + seed / 7
    w_newton, _ = w_update(t, gamma, torch.zeros(m, dtype=torch.float64), "converge")
    w_proj, _ = w_update(t, gamma, torch.zeros(m, dtype=torch.float64), "projection")
    torch.testing.assert_close(w_newton, w_proj, atol=1e-9, rtol=0)
    assert (w_newton >= 0).all()
    torch.testing.assert_close(w_newton.sum(1), torch.ones(m, dtype=torch.float64))


def test_simplex_projection_is_the_nearest_point():
    g = torch.Generator().manual_seed(1)
    v = torch.randn(6, 5, generator=g, dtype=torch.float64)
    w = simplex_projection(v)
    for _ in range(200):   # no random simplex point is closer
        z = torch.distributions.Dirichlet(torch.ones(5, dtype=torch.float64)).sample((6,))
        assert ((w - v) ** 2).sum(1).le(((z - v) ** 2).sum(1) + 1e-12).all()


def test_optimised_graph_rows_on_simplex_and_r_s_on_simplex():
    g = torch.Generator().manual_seed(3)
    m, k, f = 6, 2, 5
    p_desc = torch.randn(m, k * f, generator=g, dtype=torch.float64)
    q_desc = torch.randn(m, k * f, generator=g, dtype=torch.float64)
    w0 = torch.full((m, m), 1.0 / (m - 1), dtype=torch.float64).fill_diagonal_(0)
    lap = laplacian(w0)
    for d in (p_desc, q_desc):
        r = inverse_weighting(d, lap, 1.0)
        assert (r >= 0).all() and float(r.sum()) == pytest.approx(1.0)
    for solver in ("converge", "projection"):
        params = FedGSPParams(w_solver=solver)
        w, _, sim = optimise_graph(w0, torch.zeros(m, dtype=torch.float64), p_desc, q_desc, k, params)
        assert (w >= 0).all()
        torch.testing.assert_close(w.sum(1), torch.ones(m, dtype=torch.float64))
        assert sim.shape == (m, m)
    # the homophily similarity is cos of the summed angles times 1/3 (the code's) or 1/k (angle_mean=mean)
    r = inverse_weighting(p_desc, lap, 1.0)
    for mean, factor in (("one_third", 1.0 / 3), ("mean", 1.0 / k)):
        _, _, sim = optimise_graph(w0, torch.zeros(m, dtype=torch.float64), p_desc, q_desc, k,
                                   FedGSPParams(angle_mean=mean))
        torch.testing.assert_close(sim, similarity_matrix(p_desc, r, k, factor))
    # a single warm Newton step from the converged b̂ stays there
    t = torch.randn(m, m, generator=g, dtype=torch.float64)
    w1, b1 = w_update(t, 1.0, torch.zeros(m, dtype=torch.float64), "converge")
    w2, _ = newton_rows(1.0 / m - t / 2 + t.sum(1, keepdim=True) / (2 * m), b1, 1)
    torch.testing.assert_close(w1, w2)


def test_vertex_weighting_puts_all_its_mass_on_the_largest_quadratic_form():
    """s_update=vertex: the minimiser of -Σ s_l² n_l on the (scaled) simplex, n_l = d_lᵀ L d_l for each
    descriptor column l, is a vertex: the scale on argmax n_l, 0 elsewhere; and the heterophily
    similarity is computed with that s."""
    g = torch.Generator().manual_seed(4)
    m, k, f = 5, 2, 4
    q_desc = torch.randn(m, k * f, generator=g, dtype=torch.float64)
    p_desc = torch.randn(m, k * f, generator=g, dtype=torch.float64)
    w0 = torch.rand(m, m, generator=g, dtype=torch.float64).fill_diagonal_(0)
    lap = laplacian(w0)
    n = torch.stack([q_desc[:, l] @ lap @ q_desc[:, l] for l in range(k * f)])
    s = vertex_weighting(q_desc, lap, 2.5)
    want = torch.zeros(k * f, dtype=torch.float64)
    want[int(torch.argmax(n))] = 2.5
    torch.testing.assert_close(s, want)
    factor = 1.0 / 3
    params = FedGSPParams(s_update="vertex", similarity="principal_angle_cos", rs_scale=2.5)
    w, _, _ = optimise_graph(w0, torch.zeros(m, dtype=torch.float64), p_desc, q_desc, k, params)
    r = inverse_weighting(p_desc, lap, 2.5)    # the homophily side keeps Eq. 17
    t = params.alpha * similarity_matrix(q_desc, s, k, factor) - params.beta * similarity_matrix(p_desc, r, k, factor)
    torch.testing.assert_close(w, w_update(t, params.gamma, torch.zeros(m, dtype=torch.float64), params.w_solver)[0])


def test_the_one_step_newton_solver_takes_exactly_one_step():
    """w_solver=newton_one_step_warm: one Newton step of Eqs. 30-34 from the warm b̂, not two."""
    g = torch.Generator().manual_seed(5)
    m = 6
    h = torch.randn(4, m, generator=g, dtype=torch.float64)
    b0 = torch.zeros(4, dtype=torch.float64)
    val = (b0[:, None] - h).clamp(min=0).sum(1) / m - b0
    grad = (h < b0[:, None]).to(h.dtype).sum(1) / m - 1.0
    b1 = b0 - val / grad
    w, b = newton_rows(h, b0, 1)
    torch.testing.assert_close(b, b1)
    torch.testing.assert_close(w, (h - b1[:, None]).clamp(min=0))
    assert not torch.allclose(newton_rows(h, b0, 2)[1], b1)


def test_personalised_average_uses_order_graphs_for_combination():
    m, order = 3, 2
    weights = [{"comb_weight": torch.full((1, order + 1, 4), float(i)), "mlp.0.weight": torch.full((2, 2), float(i))}
               for i in range(m)]
    w = torch.eye(m, dtype=torch.float64)
    w_k = torch.stack([torch.full((m, m), 1.0 / m, dtype=torch.float64), torch.eye(m, dtype=torch.float64)[[1, 2, 0]]])
    out = personalised_average(weights, w, w_k)
    assert float(out[2]["mlp.0.weight"][0, 0]) == 2.0            # overall graph = identity
    assert float(out[2]["comb_weight"][0, 0, 0]) == 2.0          # order 0 follows the overall graph
    assert float(out[2]["comb_weight"][0, 1, 0]) == pytest.approx(1.0)   # order 1: uniform mean of 0,1,2
    assert float(out[2]["comb_weight"][0, 2, 0]) == 0.0          # order 2: client 2 takes client 0


def test_homophily_measures_on_hand_made_graphs():
    def und(pairs):
        ei = torch.tensor(pairs).T
        return torch.cat([ei, ei.flip(0)], 1)
    # path 0-1-2 with labels 0,0,1
    ei, y = und([(0, 1), (1, 2)]), torch.tensor([0, 0, 1])
    assert edge_homophily(ei, y) == pytest.approx(0.5)
    assert node_homophily(ei, y) == pytest.approx((1 + 0.5 + 0) / 3)
    # p(0) = 3/4, p(1) = 1/4 -> sum p^2 = 5/8; (1/2 - 5/8) / (3/8) = -1/3
    assert adjusted_homophily(ei, y) == pytest.approx(-1 / 3)
    # perfectly homophilous two cliques -> 1; bipartite (all edges across classes, balanced) -> -1
    ei = und([(0, 1), (2, 3)])
    assert adjusted_homophily(ei, torch.tensor([0, 0, 1, 1])) == pytest.approx(1.0)
    ei = und([(0, 2), (1, 3), (0, 3), (1, 2)])
    assert adjusted_homophily(ei, torch.tensor([0, 0, 1, 1])) == pytest.approx(-1.0)
    assert edge_homophily(ei, torch.tensor([0, 0, 1, 1])) == 0.0
    # unlabelled (-1) endpoints are ignored: only edge 0-1 (labels 0, 1) counts -> -1
    assert adjusted_homophily(und([(0, 1), (1, 2)]), torch.tensor([0, 1, -1])) == pytest.approx(-1.0)
    assert node_homophily(und([(0, 1), (1, 2)]), torch.tensor([0, 1, -1])) == pytest.approx(0.0)


def test_metis_overlapping_half_parts():
    from fgx.partition.metis import metis_parts
    from fgx.partition.metis_overlapping import MetisOverlappingParams, metis_overlapping
    from torch_geometric.data import Data

    ei, x = _graph(n=300, p=0.03, seed=2)
    data = Data(x=x.float(), edge_index=ei, num_nodes=300)
    p = MetisOverlappingParams(num_clients=10)
    clients = metis_overlapping(p, data, None, seed=0)
    assert len(clients) == 10
    parts = torch.from_numpy(metis_parts(ei, 300, 2, 0))
    for i, nodes in enumerate(clients):
        part = int(parts[nodes[0]])
        assert (parts[nodes] == part).all()                       # inside one METIS part
        assert nodes.numel() == int((parts == part).sum()) // 2   # half of it
        assert nodes.unique().numel() == nodes.numel()
    assert not torch.equal(clients[0], clients[1])                # different half-samples


def test_metis_overlapping_needs_a_multiple_of_five(run_fgx, tiny_cfg):
    with pytest.raises(SystemExit, match="partitioner.num_clients=7"):
        run_fgx(*tiny_cfg, "partitioner=metis_overlapping", "partitioner.num_clients=7")


def test_fedgsp_one_round_on_a_tiny_graph(run_fgx):
    run = run_fgx("dataset=hetero_homophily", "dataset.num_communities=5", "dataset.nodes_per_community=60",
                  "dataset.num_features=8", "partitioner=by_community", "model=unifilter", "model.K=3",
                  "model.hidden=16", "algorithm=fedgsp", "algorithm.k_principal=2", "rounds=1", "eval_every=1")
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed"
    graphs = [json.loads(line) for line in (run / "fedgsp_graphs.jsonl").read_text().splitlines()]
    assert len(graphs) == 1 and graphs[0]["optimised"]
    w = torch.tensor(graphs[0]["W"])
    assert w.shape == (5, 5) and (w >= 0).all()
    assert torch.tensor(graphs[0]["W_K"]).shape == (3, 5, 5)
    assert "complementarity_ratio" in graphs[0] and "heterogeneity" in graphs[0]
    assert graphs[0]["row_sum_min"] == pytest.approx(1.0) and graphs[0]["row_sum_max"] == pytest.approx(1.0)
    (hhat,) = [json.loads(line)["hhat"] for line in (run / "fedgsp_clients.jsonl").read_text().splitlines()]
    assert len(hhat) == 5 and all(0.0 <= h <= 1.0 for h in hhat)
    loss = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])["train_loss"]
    assert math.isfinite(loss) and loss > 0
    comm = json.loads((run / "comm.json").read_text())
    assert comm["totals"].get("spectral_descriptors", 0) > 0 and comm["totals"].get("model", 0) > 0
    part = json.loads((run / "partition.json").read_text())
    h = [c["edge_homophily"] for c in part["clients"]]
    assert h[0] < 0.35 and h[-1] > 0.75                           # per-client homophily spread
    assert all("adjusted_homophily" in c and "node_homophily" in c for c in part["clients"])


def test_fedgsp_resume_gives_the_same_metrics(run_fgx):
    """The checkpoint holds the collaboration graphs and the personalised models still to be sent."""
    from fgx.cli import main

    args = ["dataset=hetero_homophily", "dataset.num_communities=3", "dataset.nodes_per_community=40",
            "dataset.num_features=8", "partitioner=by_community", "model=unifilter", "model.K=2", "model.hidden=8",
            "algorithm=fedgsp", "algorithm.k_principal=2", "eval_every=1"]

    def metrics(run):
        return [(r["round"], r["split"], r["mean"]) for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())]

    full = metrics(run_fgx(*args, "rounds=3"))
    part = run_fgx(*args, "rounds=2")
    assert main(["run", *args, "rounds=3", "resume=true", f"hydra.run.dir={part}"]) == 0
    assert metrics(part) == full


def test_fedgsp_refuses_other_models(run_fgx, tiny_cfg):
    with pytest.raises(SystemExit, match="unifilter"):
        run_fgx(*tiny_cfg, "algorithm=fedgsp", "model=gcn")


def test_minesweeper_offline_roc_auc_and_near_zero_adjusted_homophily(data_root):
    import logging
    from fgx.data.base import DataEnv
    from fgx.data.heterophilous import HeterophilousParams, load_heterophilous

    ds = load_heterophilous(HeterophilousParams(), DataEnv(data_root, 0, logging.getLogger("t")))
    assert ds.data.num_nodes == 10_000 and ds.info.main_metric == "roc_auc"
    assert abs(adjusted_homophily(ds.data.edge_index, ds.data.y)) < 0.05
    assert int(ds.data.train_mask.sum()) == 2000


@pytest.mark.parametrize("block", [3, 8192])
def test_similarity_matrix_matches_the_pairwise_greedy_matching(monkeypatch, block):
    """The batched similarity (blocks of client pairs) is the scalar greedy principal-angle matching of
    every pair, ties included (duplicate descriptors, zero directions), whatever the block size."""
    import fgx.algorithms.fedgsp as fedgsp
    from fgx.algorithms.fedgsp import principal_angle_similarity
    monkeypatch.setattr(fedgsp, "PAIR_BLOCK", block)
    g = torch.Generator().manual_seed(3)
    m, k, f = 7, 4, 5
    desc = torch.randn(m, k * f, generator=g)
    desc[3] = desc[1]                               # a tie between two clients
    desc[5, :f] = 0                                 # a zero direction (rank < k)
    weight = torch.rand(k * f, generator=g, dtype=torch.float64)
    sim = similarity_matrix(desc, weight, k, 1.0 / 3)
    mats = (desc * weight).view(m, k, -1)
    for i in range(m):
        assert float(sim[i, i]) == 1.0
        for j in range(m):
            if i != j:
                want = principal_angle_similarity(mats[min(i, j)], mats[max(i, j)], 1.0 / 3)
                assert float(sim[i, j]) == pytest.approx(want, abs=1e-6), (i, j)


def test_greedy_angle_sums_reads_a_cosine_rounded_above_one_as_angle_zero():
    """Two equal principal directions can give a float32 cosine just above 1: clamped, its angle is 0,
    not arccos's NaN (seed-4 mutation sample)."""
    from fgx.algorithms.fedgsp import greedy_angle_sums

    cosm = torch.tensor([[[1.0000001, 0.0], [0.0, 1.0]]])
    assert cosm[0, 0, 0] > 1.0
    assert greedy_angle_sums(cosm).tolist() == [0.0]
