"""Certified graph unlearning (ScaleGUN): propagation invariants and bounds, the state's memory and
incremental sums, the certificate budget, the Newton step's bounds (true <= data-dependent <=
worst-case), CEU's influence step, retraining with fresh noise, federated deletion, the trainer path."""
from __future__ import annotations

import json

import numpy as np
import pytest

from fgx.federation.channel import Channel
from fgx.unlearning import propagation as propagation_module
from fgx.unlearning.bounds import embedding_change, worst_case
from fgx.unlearning.certified import MESSAGES, CertifiedServer, PartyState, certificate_budget
from fgx.unlearning.propagation import GPRPropagator, ResidueRows, exact_propagation, symmetric_adjacency
from fgx.unlearning.scalegun import CertifiedUnlearningParams, RequestProcessor

TOL = 1e-12


def random_graph(n=200, m=700, f=6, seed=0):
    rng = np.random.default_rng(seed)
    ei = rng.integers(0, n, (2, m))
    x = rng.normal(size=(n, f))
    x /= np.linalg.norm(x, axis=1).max()
    return symmetric_adjacency(ei, n), x, rng


def column_error(prop: GPRPropagator, z: np.ndarray) -> float:
    return float(np.linalg.norm(prop.Z - z, axis=0).max())


def residue_sums(prop) -> tuple[np.ndarray, np.ndarray]:
    dense = [r.dense().astype(np.float64) for r in prop.R]
    return sum(d.sum(0) for d in dense), sum(np.abs(d).sum(0) for d in dense)


@pytest.mark.parametrize("weights", [[0, 0, 1], [0.2, 0.3, 0.25, 0.25]])
@pytest.mark.parametrize("r_max", [1e-2, 1e-3, 1e-5])
def test_push_invariant_and_lemma31_bound(weights, r_max):
    adj, x, _ = random_graph()
    prop = GPRPropagator(adj, x, weights, r_max, dtype="float64")
    assert prop.invariant_error(x) < TOL
    assert prop.max_residue() <= r_max
    err = column_error(prop, exact_propagation(adj, x, weights))
    # the error stays under the residue bound (Eq. 1 from the residues held), itself under Lemma 3.1
    assert err <= prop.residue_error_bound() + 1e-14
    assert prop.residue_error_bound() <= prop.error_bound()
    if r_max >= 1e-3:
        assert err > 1e-8          # the bound is not met by accident of an exact push


def test_rmax_zero_is_exact_propagation():
    adj, x, _ = random_graph(seed=1)
    prop = GPRPropagator(adj, x, [0, 0, 1], 0.0, dtype="float64")
    assert column_error(prop, exact_propagation(adj, x, [0, 0, 1])) < 1e-13
    assert prop.stored_residue_rows() == 0


@pytest.mark.parametrize("r_max", [1e-3, 1e-5, 0.0])
def test_invariant_after_every_removal_and_lazy_equals_fresh(r_max):
    adj, x, rng = random_graph(seed=2)
    w = [0.1, 0.3, 0.6]
    prop = GPRPropagator(adj, x, w, r_max, dtype="float64")
    edges = prop.edges()
    picks = edges[:, rng.choice(edges.shape[1], 30, replace=False)]
    prop.remove_edges(picks[:, :1])                       # single edge (Algorithm 3 as a batch of one)
    assert prop.invariant_error(x) < TOL
    for k in range(1, 30, 7):                             # batches (Algorithm 4)
        prop.remove_edges(picks[:, k:k + 7])
        assert prop.invariant_error(x) < TOL
        assert prop.max_residue() <= r_max
    x_now = x.copy()
    prop.remove_node_features([3, 11])
    x_now[[3, 11]] = 0.0
    assert prop.invariant_error(x_now) < TOL
    prop.remove_nodes([5, 8])
    x_now[[5, 8]] = 0.0
    assert prop.invariant_error(x_now) < TOL
    assert prop.deg[5] == 1 and prop.deg[8] == 1          # only the self-loop is left
    assert np.allclose(prop.features(), x_now, atol=1e-15)
    # the lazily updated embedding against exact and fresh propagation on the new graph
    new_adj = prop.current_adjacency()
    exact = exact_propagation(new_adj, x_now, w)
    assert column_error(prop, exact) <= prop.residue_error_bound() + 1e-13
    fresh = GPRPropagator(new_adj, x_now, w, r_max, dtype="float64")
    assert float(np.linalg.norm(prop.Z - fresh.Z, axis=0).max()) <= 2 * prop.error_bound() + 1e-13


def test_float32_state_tracks_float64_within_rounding():
    adj, x, rng = random_graph(n=400, m=2000, f=8, seed=9)
    a = GPRPropagator(adj, x, [0, 0, 1], 1e-4, dtype="float32")
    b = GPRPropagator(adj, x, [0, 0, 1], 1e-4, dtype="float64")
    assert a.Q.dtype == np.float32 and a.Q.nbytes * 2 == b.Q.nbytes
    picks = a.edges()[:, rng.choice(a.num_edges(), 20, replace=False)]
    for j in range(20):
        a.remove_edges(picks[:, j:j + 1])
        b.remove_edges(picks[:, j:j + 1])
    assert a.invariant_error(x) < 1e-6
    scale = np.abs(b.Z).max()
    assert np.abs(a.Z - b.Z).max() <= 1e-5 * scale


def test_residue_sums_are_maintained_by_every_write():
    """1^T R (signed and |R|) is kept up to date incrementally; it must equal a recount of the state."""
    adj, x, rng = random_graph(seed=3)
    prop = GPRPropagator(adj, x, [0.1, 0.3, 0.6], 2e-2, dtype="float64")
    for step in range(6):
        e = prop.sample_edges(3, rng)
        prop.remove_edges(e)
        if step == 3:
            prop.remove_node_features([int(e[0, 0])])
            prop.remove_nodes([int(e[1, 1])])
        signed, absolute = residue_sums(prop)
        assert np.allclose(prop.residue_colsum(), signed, atol=1e-13)
        assert np.allclose(prop.residue_colsum(absolute=True), absolute, atol=1e-13)
        assert np.abs(absolute).sum() > 0


def test_residues_are_row_sparse_and_memory_follows_what_is_held():
    adj, x, _ = random_graph(n=2000, m=10000, f=32, seed=4)
    prop = GPRPropagator(adj, x, [0, 0, 1], 1e-6, dtype="float32")
    held = prop.stored_residue_rows()
    assert held < 0.05 * prop.n * prop.L                 # a residue row is stored only where one remains
    dense_state = 2 * (prop.L + 1) * prop.n * prop.F * 4  # reserves + dense residues, as before
    assert prop.Q.nbytes + sum(r.nbytes for r in prop.R) < 0.6 * dense_state


def test_residue_rows_reuse_released_slots():
    store = ResidueRows(10, 3, np.float64)
    store.put(np.array([1, 4, 7]), np.ones((3, 3)))
    store.put(np.array([4]), np.zeros((1, 3)))           # released
    assert len(store) == 2 and store.slot[4] == -1
    store.put(np.array([9]), np.full((1, 3), 2.0))
    assert store.used == 3                               # the freed slot was reused
    assert np.allclose(store.colsum, [4.0, 4.0, 4.0]) and np.allclose(store.dense()[9], 2.0)


def test_batch_removal_equals_sequential_single_edges():
    adj, x, rng = random_graph(seed=3)
    r_max = 1e-4
    a = GPRPropagator(adj, x, [0, 0, 1], r_max, dtype="float64")
    b = GPRPropagator(adj, x, [0, 0, 1], r_max, dtype="float64")
    edges = a.edges()[:, rng.choice(a.edges().shape[1], 12, replace=False)]
    a.remove_edges(edges)
    for j in range(edges.shape[1]):
        b.remove_edges(edges[:, j:j + 1])
    assert np.allclose(a.deg, b.deg)
    assert float(np.linalg.norm(a.Z - b.Z, axis=0).max()) <= 2 * a.error_bound()


def test_removal_errors_name_the_problem():
    adj, x, _ = random_graph(seed=4)
    prop = GPRPropagator(adj, x, [0, 0, 1], 1e-3)
    u, v = prop.edges()[:, 0]
    prop.remove_edges([[u], [v]])
    with pytest.raises(ValueError, match="not in the graph"):
        prop.remove_edges([[u], [v]])
    with pytest.raises(ValueError, match="self-loops"):
        prop.remove_edges([[2], [2]])
    with pytest.raises(ValueError, match="outside"):
        prop.remove_edges([[2], [10 ** 6]])
    with pytest.raises(ValueError, match="outside"):
        symmetric_adjacency(np.array([[0], [5]]), 3)


def test_edge_sampling_is_uniform_and_lists_nothing():
    adj, x, rng = random_graph(n=60, m=150, f=2, seed=5)
    prop = GPRPropagator(adj, x, [0, 0, 1], 1e-3)
    all_edges = {tuple(e) for e in prop.edges().T}
    counts = dict.fromkeys(all_edges, 0)
    for _ in range(300):
        for e in prop.sample_edges(5, rng).T:
            counts[tuple(e)] += 1
    assert set(counts) == all_edges
    freq = np.array(list(counts.values()))
    assert freq.min() > 0 and freq.max() < 4 * freq.mean()
    low = prop.sample_edges(5, rng, max_neighbours=3)
    assert np.all(np.minimum(prop.deg[low[0]], prop.deg[low[1]]) - 1 < 3)


def test_rmax_scaling_keeps_lemma31_bound_from_growing_with_n():
    from fgx.algorithms.certified_lr import effective_r_max
    for n in (1_000, 100_000, 2_500_000):
        n_t = n // 10
        r = effective_r_max(0.01, "inv_sqrt_n_nt", n, n_t, feature_l1_mean=n / 100)
        assert np.sqrt(n) * 2 * r == pytest.approx(2 * 0.01 / np.sqrt(n_t))
        grows = effective_r_max(1e-7, "feature_l1_mean", n, n_t, feature_l1_mean=n / 100)
        assert grows == pytest.approx(1e-7 * n / 100)


def test_certificate_budget_numbers():
    # Theorem 2.1: alpha * eps / sqrt(2 log(1.5 / delta)); sqrt(2 log(1.5e4)) = 4.3854 by hand
    assert certificate_budget(0.2, 1.0, 1e-4) == pytest.approx(2 * certificate_budget(0.1, 1.0, 1e-4))
    assert certificate_budget(0.1, 2.0, 1e-4) == pytest.approx(2 * certificate_budget(0.1, 1.0, 1e-4))
    assert certificate_budget(0.1, 1.0, 1e-8) < certificate_budget(0.1, 1.0, 1e-4)   # smaller delta: less room
    assert round(certificate_budget(0.1, 1.0, 1e-4), 4) == 0.0228
    assert round(certificate_budget(3.0, 1.0, 1e-4), 4) == 0.6841


def test_worst_case_bounds_follow_theorems():
    F, lam, n_t, eps1 = 10, 0.01, 100, 1e-3
    m = 0.25 * F / lam + np.sqrt(F * n_t)
    edge = worst_case("edge", eps1, [4 / np.sqrt(4) + 4 / np.sqrt(9)], F, lam, n_t)
    total = 4 * 0.25 * F / (lam * n_t) + m * (eps1 + 2 * 0.25 * F / (lam * n_t) * (2 * eps1 + 2 + 4 / 3))
    assert edge["main_approx"] + edge["main_unlearn"] == pytest.approx(total)         # Theorem 4.3
    m1 = 0.25 * F / lam + np.sqrt(F * (n_t - 1))
    feat = worst_case("feature", eps1, [np.sqrt(5)], F, lam, n_t)
    assert feat["main_approx"] + feat["main_unlearn"] == pytest.approx(
        m1 * (eps1 + 8 * 0.25 * F / (lam * (n_t - 1)) * np.sqrt(5)))                   # Theorem 4.2
    deg = np.array([3.0, 2.0, 5.0])
    assert embedding_change("node", deg, [0], neighbours=lambda u: [1, 2]) == [
        pytest.approx(4 * np.sqrt(3) + 4 / np.sqrt(2) + 4 / np.sqrt(5))]               # Lemma E.6
    assert embedding_change("edge", deg, np.array([[0, 1], [2, 2]])) == [
        pytest.approx(4 / np.sqrt(3) + 4 / np.sqrt(5)), pytest.approx(4 / np.sqrt(2) + 4 / np.sqrt(5))]  # Lemma E.5
    assert embedding_change("feature", deg, [2, 1]) == [pytest.approx(np.sqrt(5)), pytest.approx(np.sqrt(2))]  # E.1
    # a batch adds the unlearning components of its instances (Minkowski), not the approximation
    two = worst_case("edge", eps1, [1.0, 1.0], F, lam, n_t)
    one = worst_case("edge", eps1, [1.0], F, lam, n_t)
    assert two["main_unlearn"] == pytest.approx(2 * one["main_unlearn"]) and two["main_approx"] == one["main_approx"]


# -- the certified model, centralised and federated ------------------------------------------------------
def make_parties(num_clients: int, seed: int = 0, n_per: int = 60, f: int = 5, classes: int = 3):
    """Disjoint client subgraphs (edges inside each client only) with labels correlated to features."""
    rng = np.random.default_rng(seed)
    parties = []
    for cid in range(num_clients):
        y = rng.integers(0, classes, n_per)
        x = rng.normal(size=(n_per, f)) + 1.5 * np.eye(classes, f)[y]
        ei = rng.integers(0, n_per, (2, 4 * n_per))
        same = y[ei[0]] == y[ei[1]]
        ei = ei[:, same | (rng.random(ei.shape[1]) < 0.2)]
        order = rng.permutation(n_per)
        masks = {"train": np.zeros(n_per, bool), "val": np.zeros(n_per, bool), "test": np.zeros(n_per, bool)}
        masks["train"][order[:36]] = True
        masks["val"][order[36:42]] = True
        masks["test"][order[42:]] = True
        parties.append(PartyState(cid, ei, x, y, masks))
    return parties


def union_party(parties) -> PartyState:
    offs = np.cumsum([0] + [p.n for p in parties])
    return PartyState(0, np.hstack([p.edge_index + o for p, o in zip(parties, offs)]),
                      np.vstack([p.x_raw for p in parties]), np.concatenate([p.y for p in parties]),
                      {s: np.concatenate([p.masks[s] for p in parties]) for s in ("train", "val", "test")})


def build_server(parties, noise_std=0.1, r_max=1e-6, exact=False, lam=1e-2, dtype="float64"):
    server = CertifiedServer(parties, 3, lam, noise_std, Channel(MESSAGES), seed=0)
    server.preprocess("row_max")
    r_eff = r_max * server.feature_l1_mean()
    for p in parties:
        p.build_propagation([0, 0, 1], r_eff, exact, dtype)
    server.train()
    return server


def processor(server, budget=1e9, retrain=None, influence=False, **over):
    params = CertifiedUnlearningParams()
    for key, value in over.items():
        obj = params
        *path, last = key.split(".")
        for part in path:
            obj = getattr(obj, part)
        setattr(obj, last, value)
    return RequestProcessor(server, params, budget, retrain=retrain, influence=influence)


def test_training_reaches_the_optimum():
    server = build_server(make_parties(1))
    assert server.train_residual.max() <= 1e-10 * server.num_train()
    assert server.accuracy("test") > 0.5


def test_newton_step_gradient_within_data_dependent_bound():
    """Exact embeddings, no noise (Fig. 2 setting): ||grad L(w-, D')|| <= the accumulated bound."""
    server = build_server(make_parties(1, seed=5), noise_std=0.0, exact=True)
    proc = processor(server, **{"certificate.include_train_residual": False})
    edges = server.parties[0].prop.edges()
    for j in range(5):
        row = proc.process({0: edges[:, 3 * j:3 * j + 1]})
        _, grad = server.objective(server.W, server.num_train())
        true = np.linalg.norm(grad, axis=0)
        assert np.all(true <= proc.beta + 1e-12), (true, proc.beta)
        assert row["beta"] > 0


def test_request_updates_training_rows_and_gram_incrementally():
    """Delta comes from the changed rows only: it must equal the full gradient difference, and the
    clients' rows and Gram must equal a recomputation from the propagation state."""
    server = build_server(make_parties(2, seed=11), r_max=1e-4)
    proc = processor(server)
    for party in server.parties:
        party.gram(server.C)
    rng = np.random.default_rng(0)
    for kind, items in (("edge", server.parties[1].prop.sample_edges(3, rng)), ("feature", [int(server.parties[1].train_ids()[0])]),
                        ("node", [int(server.parties[1].train_ids()[2])])):
        proc.params.requests.type = kind
        party = server.parties[1]
        w = server.W.copy()
        g_before = party.local_data(server.C).grad(w)
        proc.process({1: items})
        ids = party.train_ids()
        fresh = party.prop.rows(ids)
        assert np.allclose(party.local_data(server.C).z, fresh, atol=1e-14)
        assert np.allclose(party.gram(server.C), fresh.T @ fresh, atol=1e-10)
        from fgx.unlearning.logreg import LocalData, signed_labels
        g_after = LocalData(fresh, signed_labels(party.y[ids], server.C)).grad(w)
        change = party.change
        assert np.allclose(change.old_data().grad(w) - change.new_data().grad(w), g_before - g_after, atol=1e-12)


def test_no_scan_over_residues_during_a_request(monkeypatch):
    """A request reads the residue sums the state maintains; listing or densifying residues is not allowed."""
    server = build_server(make_parties(2, seed=12), r_max=1e-3)
    proc = processor(server)
    proc.process({0: server.parties[0].prop.sample_edges(1, np.random.default_rng(1))})

    def forbidden(*a, **k):
        raise AssertionError("a request scanned the residues")

    monkeypatch.setattr(ResidueRows, "dense", forbidden)
    monkeypatch.setattr(ResidueRows, "stored_rows", forbidden)
    monkeypatch.setattr(ResidueRows, "weighted_sq_norms", forbidden)
    row = proc.process({1: server.parties[1].prop.sample_edges(2, np.random.default_rng(2))})
    assert row["residue_norm"] > 0


@pytest.mark.parametrize("mode", ["gram", "incremental"])
def test_spectral_norm_is_an_upper_bound_at_every_request(mode):
    """||Z'|| is bounded from above after every request (never a Ritz estimate): exact at a refresh, and
    with ``incremental`` the triangle inequality in between, refreshed once it is `slack` above."""
    server = build_server(make_parties(2, seed=13), r_max=1e-2)
    proc = processor(server, **{"certificate.spectral_norm": mode, "certificate.spectral_slack": 0.05})
    rng = np.random.default_rng(4)
    refreshes = []
    for j in range(12):
        cid = j % 2
        row = proc.process({cid: server.parties[cid].prop.sample_edges(2, rng)}, evaluate=False)
        z = np.vstack([p.prop.rows(p.train_ids()) for p in server.parties])
        top = np.linalg.norm(z, 2)
        assert top <= row["z_norm"] <= top * (1.05 + 1e-6 if mode == "incremental" else 1 + 1e-9)
        refreshes.append(row["spectral_refresh"])
    if mode == "incremental":     # both: requests bounded by the triangle inequality, and refreshes
        assert 0 < sum(refreshes) < len(refreshes), refreshes


def test_cg_residual_is_part_of_the_bound(monkeypatch):
    """With a solver stopped early, the step's residual ||H v - Delta|| must be counted: the true
    gradient norm stays within beta only because it is."""
    import fgx.unlearning.certified as certified
    real = certified.batched_cg
    monkeypatch.setattr(certified, "batched_cg", lambda mv, rhs, tol=1e-12, max_iter=1000: real(mv, rhs, tol, 1))
    server = build_server(make_parties(1, seed=6), noise_std=0.0, exact=True)
    proc = processor(server, **{"certificate.include_train_residual": False})
    edge = server.parties[0].prop.sample_edges(1, np.random.default_rng(6), max_neighbours=3)
    row = proc.process({0: edge})
    _, grad = server.objective(server.W, server.num_train())
    true = np.linalg.norm(grad, axis=0)
    assert row["solve_residual"] > 1e-6
    assert np.all(true <= proc.beta + 1e-12)
    assert np.any(true > proc.last["unlearning_term"])      # without the residual the bound would not hold


@pytest.mark.parametrize("kind", ["edge", "feature", "node"])
def test_true_norm_within_data_dependent_within_worst_case(kind):
    """Fig. 2: per request, true <= data-dependent <= worst-case (lazy propagation, alpha = 0)."""
    server = build_server(make_parties(1, seed=14), noise_std=0.0, r_max=1e-3)
    proc = processor(server, **{"report.bounds": True, "certificate.enforce": False, "requests.type": kind})
    party = server.parties[0]
    rng = np.random.default_rng(3)
    for j in range(4):
        items = party.prop.sample_edges(1, rng) if kind == "edge" else [int(party.train_ids()[j])]
        row = proc.process({0: items})
        assert row["true_norm"] <= row["data_dependent_bound"] <= row["worst_case_main"]
        assert row["data_dependent_bound"] <= row["worst_case_intermediate"]
        assert row["true_le_data_dependent"] and not row["retrained"]
        assert row["report_s"] > 0          # the exact propagation of the report, timed apart
        # the record's Newton-step norm is the largest per-class norm of the step taken
        assert row["newton_norm"] == pytest.approx(np.linalg.norm(proc.last_v, axis=0).max())
        # epsilon1 = sqrt(n) L r_max, the propagation error the worst-case bounds start from
        assert row["epsilon1"] == pytest.approx(np.sqrt(party.n) * party.prop.L * party.prop.r_max) and row["epsilon1"] > 0


def test_ceu_steps_with_the_hessian_before_the_removal():
    server = build_server(make_parties(1, seed=15), noise_std=0.0, exact=True)
    party = server.parties[0]
    proc = processor(server, influence=True, **{"certificate.include_train_residual": False})
    w0 = server.W.copy()
    z_old = party.local_data(server.C).z.copy()
    edges = party.prop.edges()[:, :3]
    row = proc.process({0: edges})
    # the step solved H_D v = Delta with D the data before the removal
    from fgx.unlearning.logreg import LocalData, signed_labels
    ys = signed_labels(party.y[party.train_ids()], server.C)
    v = server.W - w0
    hv = LocalData(z_old, ys).hvp(w0, v) + server.lam * server.num_train() * v
    delta = LocalData(z_old, ys).grad(w0) - party.local_data(server.C).grad(w0)
    assert np.allclose(hv, delta, atol=1e-7)
    _, grad = server.objective(server.W, server.num_train())
    assert np.all(np.linalg.norm(grad, axis=0) <= proc.beta + 1e-12)
    assert row["hessian_change_norm"] > 0


def test_accountant_retrains_with_fresh_noise_when_budget_is_exceeded():
    server = build_server(make_parties(1, seed=6))
    calls = []

    def retrain():
        calls.append(1)
        server.train(fresh_noise=True)

    b0 = server.b.copy()
    proc = processor(server, budget=1e-12, retrain=retrain)
    row = proc.process({0: server.parties[0].prop.edges()[:, :1]})
    assert row["retrained"] and row["retrain_count"] == 1 and calls
    assert not np.allclose(server.b, b0) and proc.beta.max() == 0.0
    # the record keeps the state the retrained model was released on
    assert row["residue_norm_after_retrain"] == proc.after["residue_norm"]
    assert row["rounding_term_after_retrain"] == pytest.approx(proc.rounding_term(proc.after, server.W))


def test_federated_deletion_touches_one_client_and_matches_centralised():
    parties = make_parties(4, seed=7)
    central = build_server([union_party(make_parties(4, seed=7))])
    fed = build_server(parties)
    assert np.allclose(fed.W, central.W, atol=1e-8)
    before = [(p.prop.Q.copy(), [r.dense() for r in p.prop.R]) for p in parties]
    target = 2
    u, v = parties[target].prop.edges()[:, 0]
    offset = sum(p.n for p in parties[:target])
    budget = certificate_budget(0.1, 1.0, 1e-4)
    sent = []
    real = fed.channel.send
    fed.channel.send = lambda kind, payload, src, dst, round: (sent.append((kind, src)), real(kind, payload, src, dst, round))[1]
    row_f = processor(fed, budget, solver="hessian").process({target: np.array([[u], [v]])})
    row_c = processor(central, budget, solver="hessian").process({0: np.array([[u + offset], [v + offset]])})
    assert not row_f["retrained"] and not row_c["retrained"]
    assert {src for kind, src in sent if kind == "gradient_change"} == {target}   # only its Delta is sent
    for k, (p, (q, r)) in enumerate(zip(parties, before)):
        same = np.array_equal(p.prop.Q, q) and all(np.array_equal(a.dense(), b) for a, b in zip(p.prop.R, r))
        assert same == (k != target)
    assert np.allclose(fed.W, central.W, atol=1e-8)
    assert row_f["beta"] == pytest.approx(row_c["beta"], rel=1e-6)
    assert np.allclose(np.vstack([p.prop.Z for p in parties]), central.parties[0].prop.Z, atol=1e-12)


def test_whole_client_removal():
    """A client leaving = node removal of all its nodes; its training rows leave the objective."""
    parties = make_parties(4, seed=8)
    fed = build_server(parties)
    gone = parties[1]
    proc = processor(fed, certificate_budget(0.1, 1.0, 1e-4), retrain=lambda: fed.train(fresh_noise=True),
                     **{"requests.type": "node"})
    n_before = fed.num_train()
    row = proc.process({gone.cid: list(range(gone.n))})
    assert fed.num_train() == n_before - 36
    assert gone.train_ids().size == 0 and gone.prop.edges().shape[1] == 0
    assert np.linalg.norm(gone.prop.Z, axis=0).max() <= gone.prop.error_bound()
    # the released model's gradient residual on the remaining data is within what the accountant holds
    _, grad = fed.objective(fed.W, fed.num_train())
    held = 1e-10 * fed.num_train() if row["retrained"] else row["bound"]
    assert np.linalg.norm(grad, axis=0).max() <= held


# -- the trainer path ---------------------------------------------------------------------------------------
def certified(tiny_cfg):
    return [o for o in tiny_cfg if not o.startswith(("rounds", "model."))] + ["algorithm=certified_lr", "rounds=1"]


def test_fgx_run_scalegun_writes_unlearning_json(run_fgx, tiny_cfg):
    run = run_fgx(*certified(tiny_cfg), "unlearning=scalegun", "unlearning.requests.num_requests=4",
                  "unlearning.requests.batch_size=2", "unlearning.report.bounds=true")
    out = json.loads((run / "unlearning.json").read_text())
    rows = out["requests"]
    assert len(rows) == 4 and all(r["items"] == 2 for r in rows)
    for key in ("propagation_s", "model_update_s", "certificate_s", "retrain_s", "test_accuracy", "z_norm",
                "newton_norm", "prediction_change_norm", "beta", "approx_term", "budget_left", "retrain_count",
                "solve_residual", "true_norm", "data_dependent_bound", "worst_case_main"):
        assert key in rows[0], key
    for r in rows:
        assert r["true_norm"] <= r["data_dependent_bound"] <= r["worst_case_main"]
        assert r["total_s"] >= r["propagation_s"] + r["model_update_s"] + r["certificate_s"]
    s = out["summary"]
    assert s["bounds_true_le_data_dependent"] == 1.0 and s["bounds_data_dependent_le_worst_case"] == 1.0
    assert 0.0 <= s["mia_auc_before"] <= 1.0 and 0.0 <= s["mia_auc_after"] <= 1.0
    assert s["final_test_accuracy"] == [r["test_accuracy"] for r in rows if r["test_accuracy"] is not None][-1]
    for key in ("total_s", "propagation_s", "certificate_s"):     # the summary's means are the rows'
        assert s[f"mean_{key}"] == pytest.approx(np.mean([r[key] for r in rows])) and s[f"mean_{key}"] > 0
    assert out["setup"]["dtype"] == "float32" and out["setup"]["epsilon1"] > 0
    # the whole C-class model's guarantee, (C eps, C delta) by basic composition, beside the per-class one
    per_class, whole = out["setup"]["certificate_per_class"], out["setup"]["whole_model"]
    from omegaconf import OmegaConf
    classes = OmegaConf.load(run / ".hydra" / "config.yaml").dataset.num_classes     # csbm's, 5
    assert whole["classes"] == classes and whole["composition"].startswith("basic composition")
    assert whole["epsilon"] == pytest.approx(classes * per_class["epsilon"])
    assert whole["delta"] == pytest.approx(classes * per_class["delta"])
    assert (s["whole_model_epsilon"], s["whole_model_delta"]) == (whole["epsilon"], whole["delta"])
    from fgx.report.plots import make_figure
    fig = make_figure([run], kind="bounds")          # the paper's Fig. 2 from the run
    assert [ln.get_label() for ln in fig.axes[0].lines] == ["worst-case bound", "data-dependent bound", "true norm"]
    assert json.loads((run / "summary.json").read_text())["unlearning"]["requests"] == 4


@pytest.mark.parametrize("overrides", [["unlearning=cgu"], ["unlearning=scalegun", "algorithm.exact=true"]],
                         ids=["cgu", "scalegun_exact"])
def test_an_exact_propagation_start_reports_no_propagation_error(run_fgx, tiny_cfg, overrides):
    """CGU (and ScaleGUN with algorithm.exact=true) start from exactly propagated embeddings: the record's
    setup states r_max_effective 0 and no ε1 term, where the approximate start states both (above)."""
    run = run_fgx(*certified(tiny_cfg), *overrides, "unlearning.requests.num_requests=1",
                  "unlearning.requests.batch_size=1")
    setup = json.loads((run / "unlearning.json").read_text())["setup"]
    assert setup["r_max_effective"] == 0.0 and setup["epsilon1"] == 0.0
    assert ("exact_propagation_s" in setup) == (overrides == ["unlearning=cgu"])


def test_unlearning_needs_the_certified_model(run_fgx, tiny_cfg):
    with pytest.raises(SystemExit, match="algorithm.name.*certified_lr"):
        run_fgx(*tiny_cfg, "unlearning=scalegun")


def test_ceu_is_for_edges(run_fgx, tiny_cfg):
    with pytest.raises(SystemExit, match="unlearning.requests.type.*edge"):
        run_fgx(*certified(tiny_cfg), "unlearning=ceu", "unlearning.requests.type=node")


def test_fgx_run_baselines_and_adversarial_edges(run_fgx, tiny_cfg):
    over = certified(tiny_cfg)
    cgu = json.loads((run_fgx(*over, "unlearning=cgu", "unlearning.requests.type=feature",
                              "unlearning.requests.num_requests=3") / "unlearning.json").read_text())
    assert cgu["method"] == "cgu" and all(r["residue_norm"] == 0.0 for r in cgu["requests"])
    ceu = json.loads((run_fgx(*over, "unlearning=ceu", "unlearning.requests.num_requests=3") / "unlearning.json").read_text())
    assert ceu["method"] == "ceu" and all("hessian_change_norm" in r for r in ceu["requests"])
    retrain = json.loads((run_fgx(*over, "unlearning=retrain", "unlearning.eval_every=2",
                                  "unlearning.requests.num_requests=4") / "unlearning.json").read_text())
    assert [r["retrained"] for r in retrain["requests"]] == [False, True, False, True]
    assert retrain["requests"][0]["test_accuracy"] is None and retrain["summary"]["retrain_count"] == 2
    draws = [r["noise_draws"] for r in retrain["requests"] if r["retrained"]]
    assert draws[1] == draws[0] + 1                      # fresh noise at every retraining
    same = json.loads((run_fgx(*over, "unlearning=retrain_same_noise", "unlearning.requests.num_requests=2")
                       / "unlearning.json").read_text())
    assert same["method"] == "retrain_same_noise" and len({r["noise_draws"] for r in same["requests"]}) == 1
    adv = json.loads((run_fgx(*over, "unlearning=scalegun", "unlearning.requests.selection=adversarial",
                              "unlearning.requests.num_add=30", "unlearning.requests.batch_size=10",
                              "unlearning.requests.num_requests=3") / "unlearning.json").read_text())
    assert adv["setup"]["injected_edges"] == 30
    assert {"clean_test_accuracy", "accuracy_recovery"} <= set(adv["summary"])


def test_bench_script_runs_small(tmp_path):
    import subprocess
    import sys
    out = tmp_path / "bench.json"
    rc = subprocess.run([sys.executable, "scripts/bench_unlearning.py", "--nodes", "3000", "--edges", "15000",
                         "--features", "8", "--requests", "4", "--exact", "1", "--json", str(out)],
                        capture_output=True, text=True, cwd=propagation_module.__file__.rsplit("/fgx/", 1)[0])
    assert rc.returncode == 0, rc.stdout + rc.stderr
    res = json.loads(out.read_text())
    assert res["max_column_error"] <= res["residue_error_bound"] + res["rounding_allowance"]
    assert res["residue_error_bound"] <= res["lemma31_bound"] and res["exact_s_median"] > 0


def test_bench_script_times_whole_requests(tmp_path):
    """--model both: propagation, model update and certificate per request for cg and factored, and a
    full retraining, on the same graph and requests."""
    import subprocess
    import sys
    out = tmp_path / "bench.json"
    rc = subprocess.run([sys.executable, "scripts/bench_unlearning.py", "--nodes", "3000", "--edges", "15000",
                         "--features", "8", "--classes", "4", "--requests", "4", "--model", "both", "--json", str(out)],
                        capture_output=True, text=True, cwd=propagation_module.__file__.rsplit("/fgx/", 1)[0])
    assert rc.returncode == 0, rc.stdout + rc.stderr
    res = json.loads(out.read_text())["solvers"]
    for solver in ("cg", "factored"):
        r = res[solver]
        assert r["median"]["propagation_s"] > 0 and r["median"]["model_update_s"] > 0 and r["full_retrain_s"] > 0
        assert r["ratio_model_to_propagation"] == pytest.approx(r["median"]["model_update_s"] / r["median"]["propagation_s"])
    assert res["factored"]["anchor_builds_s"] and not res["cg"]["anchor_builds_s"]
    assert "x propagation" in rc.stdout


@pytest.mark.parametrize("preset", sorted(p.stem for p in (
    __import__("pathlib").Path(propagation_module.__file__).parents[2] / "conf" / "experiment").glob("scalegun_*.yaml")))
def test_scalegun_presets_compose_for_every_swept_value(preset):
    """Every method / scenario / r_max a preset sweeps is a valid configuration."""
    from omegaconf import OmegaConf

    from fgx.cli import compose, conf_dir
    from fgx.config import validate

    params = OmegaConf.load(conf_dir() / "experiment" / f"{preset}.yaml").hydra.sweeper.params
    for key, values in params.items():
        for value in str(values).split(","):
            v = validate(compose([f"+experiment={preset}", f"{key}={value}"]))
            assert v.names["algorithm"] == "certified_lr"


def test_exact_propagator_exact_embedding_is_the_current_graphs_propagation():
    """ExactPropagator.exact_embedding (what CGU's and CEU's true gradient norm reads): the exact
    propagation of the current features over the current graph, all columns or the ones asked, in the
    dtype asked."""
    from fgx.unlearning.propagation import ExactPropagator
    adj, x, _ = random_graph(seed=3)
    w = [0.2, 0.3, 0.5]
    prop = ExactPropagator(adj, x, w, dtype="float32")
    prop.remove_edges(np.array([[0], [adj[0].indices[adj[0].indices != 0][0]]]))
    want = exact_propagation(prop.adj, prop.x.astype(np.float64), w, prop.deg)
    full = prop.exact_embedding()
    assert full.dtype == np.float64 and np.abs(full - want).max() < 1e-12
    two = prop.exact_embedding(columns=[1, 4])
    assert two.shape == (x.shape[0], 2) and np.abs(two - want[:, [1, 4]]).max() < 1e-12
    assert prop.exact_embedding(dtype=np.float32).dtype == np.float32
    # it is the graph after the removal, not the one the propagator started from
    assert np.abs(full - exact_propagation(adj, prop.x.astype(np.float64), w)).max() > 1e-6


def test_vulnerable_edges_are_low_degree_test_nodes_edges_to_same_label_neighbours_once():
    """ScaleGUN Table 1's selection (requests.selection=vulnerable): test nodes with fewer than
    max_degree neighbours give their edges to same-label neighbours, each undirected edge once."""
    from types import SimpleNamespace

    from fgx.unlearning.requests import vulnerable_edges
    # a path 0-1-2-3 plus a star around 4 (neighbours 0, 1, 2, 3, 5); labels: 0,1,2,4 share label 0
    ei = np.array([[0, 1, 2, 4, 4, 4, 4, 4], [1, 2, 3, 0, 1, 2, 3, 5]])
    prop = GPRPropagator(symmetric_adjacency(ei, 6), np.eye(6), [0, 1], 0.0, dtype="float64")
    y = np.array([0, 0, 0, 1, 0, 1])
    party = SimpleNamespace(cid=7, prop=prop, y=y,
                            split_ids=lambda name: {"test": np.array([0, 1, 4])}[name])
    got = vulnerable_edges([party], max_degree=3, rng=np.random.default_rng(0))
    edges = sorted(tuple(sorted(e.tolist())) for _, e in got)
    # test nodes: 0 (neighbours 1, 4: in), 1 (neighbours 0, 2, 4: not fewer than 3), 4 (5 neighbours);
    # node 0's same-label neighbours are 1 and 4
    assert edges == [(0, 1), (0, 4)] and {c for c, _ in got} == {7}
    both = vulnerable_edges([party], max_degree=4, rng=np.random.default_rng(0))
    # node 1 joins: its same-label edges (1, 0) -- already listed by node 0 -- (1, 2) and (1, 4)
    assert sorted(tuple(sorted(e.tolist())) for _, e in both) == [(0, 1), (0, 4), (1, 2), (1, 4)]


def test_adversarial_injection_adds_distinct_new_edges_between_different_labels():
    """requests.selection=adversarial: the injected edges join differently labelled nodes of a client,
    are not edges already, and are each added once (here every such pair of the client is drawn)."""
    from types import SimpleNamespace

    from fgx.unlearning.requests import inject_adversarial
    y = np.array([0, 1, 0, 1, 0])
    party = SimpleNamespace(cid=3, n=5, y=y, edge_index=np.array([[0, 1], [1, 0]]))
    out = inject_adversarial([party], 5, np.random.default_rng(0))
    got = sorted(map(tuple, out[3].T.tolist()))
    # the 6 pairs of different labels, less the existing edge (0, 1)
    assert got == [(0, 3), (1, 2), (1, 4), (2, 3), (3, 4)] and party.extra_edges is out[3]


def test_state_bytes_are_the_bytes_of_the_arrays_the_state_holds():
    """memory_bytes (the record's state_bytes, bench_unlearning's state_gb) adds up the arrays each
    propagator owns: ScaleGUN's reserves, residue rows, adjacency entries and index, degrees and push
    bookkeeping (the features are the caller's, a reference); the exact propagator's own copy of the
    features and Z. Residues stored by a lazy removal add their bytes."""
    from fgx.unlearning.propagation import ExactPropagator
    adj, x, _ = random_graph(seed=4)

    def csr(a):
        return a.data.nbytes + a.indices.nbytes + a.indptr.nbytes

    prop = GPRPropagator(adj, x, [0, 0, 1], 1e-3, dtype="float64")
    prop.remove_edges(prop.sample_edges(5, np.random.default_rng(4)))
    held = sum(r.nbytes for r in prop.R)
    assert held > 0 and prop._x is x
    assert prop.memory_bytes() == (prop.Q.nbytes + held + csr(prop.adj) + prop.deg.nbytes + prop._pos.nbytes
                                   + prop._mark.nbytes)
    exact = ExactPropagator(adj, x, [0, 0, 1], dtype="float64")
    assert exact.memory_bytes() == exact.x.nbytes + exact.Z.nbytes + csr(exact.adj) + exact.deg.nbytes


def test_certificate_warnings_name_their_numbers(run_fgx, tiny_cfg):
    """The certificate's two run-level warnings reach fgx.log with their numbers: the trained model
    re-propagated and retrained because its bound exceeds the budget, and, with
    certificate.enforce=false, how many released models were outside the certificate."""
    over = [*certified(tiny_cfg), "unlearning=scalegun", "unlearning.requests.num_requests=3", "unlearning.mia=false",
            "unlearning.attacks=false", "unlearning.certificate.epsilon=1e-6"]
    run = run_fgx(*over)
    out = json.loads((run / "unlearning.json").read_text())
    assert out["setup"]["repropagated"]
    assert f"exceeds the budget {out['budget']:.3g}: re-propagated exactly" in (run / "fgx.log").read_text()
    run = run_fgx(*over, "unlearning.certificate.enforce=false")
    s = json.loads((run / "unlearning.json").read_text())["summary"]
    assert s["requests_outside_budget"] == 3
    assert "3 of 3 released models were outside the certificate" in (run / "fgx.log").read_text()


def test_retrain_defers_the_exact_propagation_to_the_requests_it_evaluates(monkeypatch):
    """unlearning=retrain only changes the graph on a request it does not evaluate; the exact
    re-propagation (and the retraining) run once, on the request that evaluates."""
    from types import SimpleNamespace

    from fgx.unlearning import propagation
    from fgx.unlearning.retrain import RetrainParams, RetrainProcessor
    server = build_server(make_parties(1, seed=7), exact=True)
    calls = []
    real = propagation.exact_propagation
    monkeypatch.setattr(propagation, "exact_propagation", lambda *a, **k: calls.append(1) or real(*a, **k))
    proc = RetrainProcessor(server, RetrainParams(), SimpleNamespace(train=server.train))
    rng = np.random.default_rng(7)
    rows = [proc.process({0: server.parties[0].prop.sample_edges(1, rng)}, evaluate=e) for e in (False, False, True)]
    assert [r["retrained"] for r in rows] == [False, False, True] and len(calls) == 1


def test_features_recovered_from_the_state_on_a_graph_larger_than_one_chunk():
    """GPRPropagator.features() reads X back from the invariant x = (q0 + r0) / sqrt(d) in chunks of
    65,536 rows; on a 70,000-node ring every row, in both chunks, is the feature row given."""
    n = 70_000
    ei = np.stack([np.arange(n), (np.arange(n) + 1) % n])
    x = np.random.default_rng(0).normal(size=(n, 2))
    x /= np.linalg.norm(x, axis=1).max()
    prop = GPRPropagator(symmetric_adjacency(ei, n), x, [0, 0, 1], 1e-2, dtype="float64")
    assert np.abs(prop.features() - x).max() < 1e-12


def test_a_feature_request_zeroes_the_features_and_keeps_the_edges():
    """requests.type=feature removes a node's features, not the node: its edges stay (a node request
    drops both)."""
    server = build_server(make_parties(1, seed=16), noise_std=0.0, r_max=1e-3)
    party = server.parties[0]
    u = int(party.train_ids()[0])
    nb = party.prop.neighbours(u).copy()
    assert nb.size
    processor(server, **{"certificate.enforce": False, "requests.type": "feature"}).process({0: [u]})
    assert np.array_equal(party.prop.neighbours(u), nb)
    assert np.abs(party.prop.features([u])).max() < 1e-12
    processor(server, **{"certificate.enforce": False, "requests.type": "node"}).process({0: [u]})
    assert party.prop.neighbours(u).size == 0


def test_edge_removal_takes_one_edge_as_a_pair_and_names_an_edge_not_in_the_graph():
    adj, x, _ = random_graph(seed=8)
    prop = GPRPropagator(adj, x, [0, 0, 1], 1e-3, dtype="float64")
    u, v = prop.edges()[:, 0]
    prop.remove_edges(np.array([u, v]))                   # one edge, as a flat pair
    assert v not in prop.neighbours(u)
    w = next(t for t in range(prop.n) if t != u and t not in prop.neighbours(u))
    with pytest.raises(ValueError, match=rf"edge \({u}, {w}\) is not in the graph"):
        prop.remove_edges(np.array([[prop.edges()[0, 0], u], [prop.edges()[1, 0], w]]))


def test_rounding_count_is_summed_in_float64_in_a_float32_state():
    """The state's rounding count bounds float32 rounding, so it must not be rounded in float32 itself:
    a column of |values| summing to 2^24 + 1 is counted as that, not as float32's 2^24."""
    adj, x, _ = random_graph(n=30, m=60, f=2)
    prop = GPRPropagator(adj, x, [0, 0, 1], 1e-3, dtype="float32")
    prop.rounding = np.zeros(2)                     # what the initial push counted is not under test
    values = np.array([[2.0 ** 24, -1.0], [1.0, 2.0]], dtype=np.float32)
    prop._account(3.0, values)
    assert np.array_equal(prop.rounding, (3.0 * prop.unit) * np.array([2.0 ** 24 + 1, 3.0]))
