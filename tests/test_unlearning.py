"""Certified graph unlearning (ScaleGUN): propagation invariants and bounds, the certificate budget,
the Newton step's data-dependent bound, federated deletion, and the trainer path."""
from __future__ import annotations

import json

import numpy as np
import pytest

from fgx.federation.channel import Channel
from fgx.unlearning.certified import MESSAGES, CertifiedServer, PartyState, certificate_budget
from fgx.unlearning.propagation import GPRPropagator, exact_propagation, symmetric_adjacency
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


@pytest.mark.parametrize("weights", [[0, 0, 1], [0.2, 0.3, 0.25, 0.25]])
@pytest.mark.parametrize("r_max", [1e-2, 1e-3, 1e-5])
def test_push_invariant_and_lemma31_bound(weights, r_max):
    adj, x, _ = random_graph()
    prop = GPRPropagator(adj, x, weights, r_max)
    assert prop.invariant_error() < TOL
    assert prop.max_residue() <= r_max
    err = column_error(prop, exact_propagation(adj, x, weights))
    assert err <= prop.error_bound()
    assert err > 0     # the bound is not met by accident of an exact push


def test_rmax_zero_is_exact_propagation():
    adj, x, _ = random_graph(seed=1)
    prop = GPRPropagator(adj, x, [0, 0, 1], 0.0)
    assert column_error(prop, exact_propagation(adj, x, [0, 0, 1])) < 1e-13


@pytest.mark.parametrize("r_max", [1e-3, 1e-5, 0.0])
def test_invariant_after_every_removal_and_lazy_equals_fresh(r_max):
    adj, x, rng = random_graph(seed=2)
    w = [0.1, 0.3, 0.6]
    prop = GPRPropagator(adj, x, w, r_max)
    edges = prop.edges()
    picks = edges[:, rng.choice(edges.shape[1], 30, replace=False)]
    prop.remove_edges(picks[:, :1])                       # single edge (Algorithm 3 as a batch of one)
    assert prop.invariant_error() < TOL
    for k in range(1, 30, 7):                             # batches (Algorithm 4)
        prop.remove_edges(picks[:, k:k + 7])
        assert prop.invariant_error() < TOL
        assert prop.max_residue() <= r_max
    prop.remove_node_features([3, 11])
    assert prop.invariant_error() < TOL
    prop.remove_nodes([5, 8])
    assert prop.invariant_error() < TOL
    assert prop.deg[5] == 1 and prop.deg[8] == 1          # only the self-loop is left
    # the lazily updated embedding against exact and fresh propagation on the new graph
    new_adj = prop.current_adjacency()
    exact = exact_propagation(new_adj, prop.x, w)
    assert column_error(prop, exact) <= prop.error_bound() + 1e-13
    fresh = GPRPropagator(new_adj, prop.x, w, r_max)
    assert float(np.linalg.norm(prop.Z - fresh.Z, axis=0).max()) <= 2 * prop.error_bound() + 1e-13


def test_batch_removal_equals_sequential_single_edges():
    adj, x, rng = random_graph(seed=3)
    r_max = 1e-4
    a = GPRPropagator(adj, x, [0, 0, 1], r_max)
    b = GPRPropagator(adj, x, [0, 0, 1], r_max)
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


def test_certificate_budget_numbers():
    c = np.sqrt(2 * np.log(1.5 / 1e-4))
    assert round(c, 4) == 4.3854
    assert round(certificate_budget(0.1, 1.0, 1e-4), 4) == 0.0228
    assert round(certificate_budget(3.0, 1.0, 1e-4), 4) == 0.6841


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


def build_server(parties, noise_std=0.1, r_max=1e-6, exact=False, lam=1e-2):
    server = CertifiedServer(parties, 3, lam, noise_std, Channel(MESSAGES), seed=0)
    server.preprocess("row_max")
    r_eff = r_max * server.feature_l1_mean()
    for p in parties:
        p.build_propagation([0, 0, 1], r_eff, exact)
    server.train()
    return server


def test_training_reaches_the_optimum():
    server = build_server(make_parties(1))
    assert server.train_residual.max() <= 1e-10 * server.num_train()
    assert server.accuracy("test") > 0.5


def test_newton_step_gradient_within_data_dependent_bound():
    """Exact embeddings, no noise (Fig. 2 setting): ||grad L(w-, D')|| <= the accumulated bound."""
    server = build_server(make_parties(1, seed=5), noise_std=0.0, exact=True)
    params = CertifiedUnlearningParams()
    params.certificate.include_train_residual = False
    proc = RequestProcessor(server, params, budget=1e9, newton=True, retrain=None, baseline_retrain=None)
    edges = server.parties[0].prop.edges()
    for j in range(5):
        row = proc.process({0: edges[:, 3 * j:3 * j + 1]})
        _, grad = server.objective(server.W, server.num_train())
        true = np.linalg.norm(grad, axis=0)
        assert np.all(true <= proc.beta + 1e-12), (true, proc.beta)
        assert row["beta"] > 0


def test_accountant_retrains_with_fresh_noise_when_budget_is_exceeded():
    server = build_server(make_parties(1, seed=6))
    calls = []

    def retrain():
        calls.append(1)
        server.train(fresh_noise=True)

    params = CertifiedUnlearningParams()
    b0 = server.b.copy()
    proc = RequestProcessor(server, params, budget=1e-12, newton=True, retrain=retrain, baseline_retrain=None)
    row = proc.process({0: server.parties[0].prop.edges()[:, :1]})
    assert row["retrained"] and row["retrain_count"] == 1 and calls
    assert not np.allclose(server.b, b0) and proc.beta.max() == 0.0


def test_federated_deletion_touches_one_client_and_matches_centralised():
    parties = make_parties(4, seed=7)
    central = build_server([union_party(make_parties(4, seed=7))])
    fed = build_server(parties)
    assert np.allclose(fed.W, central.W, atol=1e-8)
    before = [(p.prop.Q.copy(), p.prop.R.copy(), p.prop.Z.copy()) for p in parties]
    target = 2
    u, v = parties[target].prop.edges()[:, 0]
    offset = sum(p.n for p in parties[:target])
    params = CertifiedUnlearningParams()
    params.solver = "hessian"
    budget = certificate_budget(0.1, 1.0, 1e-4)
    ex0 = fed.exchanges
    row_f = RequestProcessor(fed, params, budget, True, None, None).process({target: np.array([[u], [v]])})
    row_c = RequestProcessor(central, params, budget, True, None, None).process(
        {0: np.array([[u + offset], [v + offset]])})
    assert not row_f["retrained"] and not row_c["retrained"]
    assert fed.exchanges - ex0 == 2              # newton statistics, then prediction-change norms
    for k, (p, (q, r, z)) in enumerate(zip(parties, before)):
        same = np.array_equal(p.prop.Q, q) and np.array_equal(p.prop.R, r) and np.array_equal(p.prop.Z, z)
        assert same == (k != target)
    assert np.allclose(fed.W, central.W, atol=1e-8)
    assert row_f["beta"] == pytest.approx(row_c["beta"], rel=1e-6)
    assert np.allclose(np.vstack([p.prop.Z for p in parties]), central.parties[0].prop.Z, atol=1e-12)


def test_whole_client_removal():
    """A client leaving = node removal of all its nodes; its training rows leave the objective."""
    parties = make_parties(4, seed=8)
    fed = build_server(parties)
    gone = parties[1]
    params = CertifiedUnlearningParams()
    params.requests.type = "node"
    proc = RequestProcessor(fed, params, certificate_budget(0.1, 1.0, 1e-4), True,
                            lambda: fed.train(fresh_noise=True), None)
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
def test_fgx_run_scalegun_writes_unlearning_json(run_fgx, tiny_cfg):
    over = [o for o in tiny_cfg if not o.startswith(("rounds", "model."))]
    run = run_fgx(*over, "algorithm=certified_lr", "unlearning=scalegun", "rounds=1",
                  "unlearning.requests.num_requests=4", "unlearning.requests.batch_size=2")
    out = json.loads((run / "unlearning.json").read_text())
    rows = out["requests"]
    assert len(rows) == 4 and all(r["items"] == 2 for r in rows)
    for key in ("propagation_s", "newton_s", "retrain_s", "test_accuracy", "z_norm", "newton_norm",
                "prediction_change_norm", "beta", "approx_term", "budget_left", "retrain_count"):
        assert key in rows[0], key
    s = out["summary"]
    assert 0.0 <= s["mia_auc_before"] <= 1.0 and 0.0 <= s["mia_auc_after"] <= 1.0
    assert json.loads((run / "summary.json").read_text())["unlearning"]["requests"] == 4


def test_unlearning_needs_the_certified_model(run_fgx, tiny_cfg):
    with pytest.raises(SystemExit, match="algorithm.name.*certified_lr"):
        run_fgx(*tiny_cfg, "unlearning=scalegun")


def test_fgx_run_baselines_and_adversarial_edges(run_fgx, tiny_cfg):
    over = [o for o in tiny_cfg if not o.startswith(("rounds", "model."))] + ["algorithm=certified_lr", "rounds=1"]
    cgu = json.loads((run_fgx(*over, "unlearning=cgu", "unlearning.requests.type=feature",
                              "unlearning.requests.num_requests=3") / "unlearning.json").read_text())
    assert cgu["method"] == "cgu" and all(r["residue_norm"] == 0.0 for r in cgu["requests"])
    retrain = json.loads((run_fgx(*over, "unlearning=retrain", "unlearning.retrain_every=2",
                                  "unlearning.requests.num_requests=4") / "unlearning.json").read_text())
    assert [r["retrained"] for r in retrain["requests"]] == [False, True, False, True]
    assert retrain["requests"][0]["test_accuracy"] is None and retrain["summary"]["retrain_count"] == 2
    adv = json.loads((run_fgx(*over, "unlearning=scalegun", "unlearning.requests.selection=adversarial",
                              "unlearning.requests.num_add=30", "unlearning.requests.batch_size=10",
                              "unlearning.requests.num_requests=3") / "unlearning.json").read_text())
    assert adv["setup"]["injected_edges"] == 30
    assert {"clean_test_accuracy", "accuracy_recovery"} <= set(adv["summary"])
