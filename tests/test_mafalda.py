"""Decentralised learning with matrix-factorisation privacy accounting (issue #8)."""
import json

import networkx as nx
import numpy as np
import pytest

from fgx.decentral.topology import TopologyParams, build_graph, check_gossip_matrix, gossip_matrix
from fgx.privacy.mf.correlations import build_correlation
from fgx.privacy.mf.gdp import eps_from_mu, eps_from_mu_many, rdp_from_mu
from fgx.privacy.mf.participation import local_patterns
from fgx.privacy.mf.pndp import cyffers_rdp, pairwise_table, pndp_table
from fgx.privacy.mf.sensitivity import local_sens2, pattern_bound, sens2_from_gram
from fgx.privacy.mf.solver import lower_factor, optimise_gram
from fgx.privacy.mf.trust import accounting_cost, knowledge_gram, oriented_incidence, victim_grams, victim_sens2
from fgx.privacy.mf.workloads import (dl_workload, frobenius_objective_explicit, gossip_gram,
                                      lemma10_gram_explicit)


def florentine():
    g = build_graph(TopologyParams(graph="florentine"))
    return g, gossip_matrix(g)


@pytest.mark.parametrize("k,b", [(1, 1), (4, 3), (20, 17), (10, 1)])
def test_identity_sensitivity_is_k(k, b):
    assert local_sens2(np.eye(k * b), b) == pytest.approx(k)


def test_antipgd_sensitivity_matches_jax_privacy_oracle():
    # jax-privacy fixed_epoch_sensitivity(tril(ones(16)), epochs=4) = 10.954 (spec §2.8), i.e. sens² = 120
    assert np.sqrt(local_sens2(np.tril(np.ones((16, 16))), 4)) == pytest.approx(10.954, abs=1e-3)


@pytest.mark.parametrize("variant,power", [("postavg", 1), ("message", 0)])
def test_closed_form_gram_equals_explicit(variant, power):
    g, w = florentine()
    n, steps = w.shape[0], 9
    explicit = lemma10_gram_explicit(dl_workload(w, steps, power), n, steps)
    assert np.allclose(gossip_gram(w, steps, variant), explicit, atol=1e-10)


def test_lemma10_objective_identity():
    _, w = florentine()
    steps = 8
    rng = np.random.default_rng(0)
    c = np.tril(rng.normal(size=(steps, steps))) + 3 * np.eye(steps)
    h = gossip_gram(w, steps)
    cinv = np.linalg.inv(c)
    assert np.trace(cinv.T @ h @ cinv) == pytest.approx(frobenius_objective_explicit(w, steps, c), rel=1e-10)


def test_epsilon_from_mu_matches_dp_accounting():
    import dp_accounting
    assert eps_from_mu(1.0, 1e-6) == pytest.approx(4.8866, abs=1e-4)
    for mu in (0.5, 1.0, 2.0):
        assert eps_from_mu(mu, 1e-6) == pytest.approx(dp_accounting.get_epsilon_gaussian(1.0 / mu, 1e-6), rel=1e-4)
    assert rdp_from_mu(1.0, 2.0) == 1.0


@pytest.mark.parametrize("graph", ["florentine", "karate", "ring", "star", "torus", "erdos_renyi", "random_regular"])
@pytest.mark.parametrize("kind", ["uniform", "metropolis_hastings"])
def test_gossip_matrices_are_row_stochastic_on_edges(graph, kind):
    g = build_graph(TopologyParams(graph=graph, num_nodes=12))
    check_gossip_matrix(gossip_matrix(g, kind), g)


def test_solver_factor_is_lower_and_sensitivity_one():
    _, w = florentine()
    corr = build_correlation("mafalda", w, 3, 4, max_iter=500)
    assert np.allclose(corr.c_local, np.tril(corr.c_local))
    assert corr.sens2 == pytest.approx(1.0, abs=1e-8)
    assert np.allclose(lower_factor(corr.c_local.T @ corr.c_local), corr.c_local)


def test_surrogate_objective_ordering_florentine():
    # 30 solver iterations keep the test fast; the ordering holds from the first iterations on
    _, w = florentine()
    obj = {m: build_correlation(m, w, 20, 17, max_iter=30).objective
           for m in ("mafalda", "dmf", "identity", "antipgd")}
    assert obj["identity"] == pytest.approx(1.376e6, rel=1e-3)
    assert obj["antipgd"] == pytest.approx(9.699e7, rel=1e-3)
    assert obj["mafalda"] < obj["dmf"] < obj["identity"] < obj["antipgd"]


@pytest.mark.slow
def test_surrogate_objective_converged_florentine():
    # spec §6 (authors' solver conventions): D-MF x0.126 and MAFALDA x0.115 of DP-D-SGD
    _, w = florentine()
    ident = build_correlation("identity", w, 20, 17).objective
    mafalda = build_correlation("mafalda", w, 20, 17).objective
    dmf = build_correlation("dmf", w, 20, 17).objective
    assert mafalda / ident == pytest.approx(0.115, abs=0.01)
    assert dmf / ident == pytest.approx(0.126, abs=0.01)


def test_pndp_florentine_by_distance():
    g, w = florentine()
    t = pndp_table(w, g, 10, attacker=0)
    ldp = t["ldp_rdp"]
    assert ldp == pytest.approx(10.0)
    rows = {r["distance"]: r["rdp"] for r in t["by_distance"]}
    assert rows[1]["mean"] == pytest.approx(ldp, rel=0.05)
    assert rows[2]["mean"] == pytest.approx(0.454, abs=1e-3)
    for d, r in rows.items():
        if d >= 3:
            assert r["max"] * 10 < ldp
    # the matrix bound is tighter than Cyffers et al.'s beyond the neighbours, and equal at distance 1
    for r in t["by_distance"]:
        if r["distance"] == 1:
            assert r["cyffers_rdp"]["mean"] == pytest.approx(r["rdp"]["mean"], rel=1e-6)
        else:
            assert r["cyffers_rdp"]["mean"] > 2 * r["rdp"]["mean"], r


def test_secldp_secrets_reduce_loss_against_ldp():
    _, w = florentine()
    steps, n = 3, w.shape[0]
    x_sec = knowledge_gram(w, steps, None, "secldp", [0], secrets=oriented_incidence(w))
    x_pndp = knowledge_gram(w, steps, None, "pndp", [0])
    x_ldp = knowledge_gram(w, steps, None, "ldp", [0])
    for u in (1, 5, 14):
        s_sec, s_pndp, s_ldp = (victim_sens2(x, n, steps, 1, u) for x in (x_sec, x_pndp, x_ldp))
        assert s_ldp == pytest.approx(steps)
        assert s_pndp < s_ldp - 0.1                       # the attacker does not see every message
        # the secrets hide strictly more than PNDP leaves hidden (both 0 where PNDP already hides all)
        assert s_sec < 0.5 * s_pndp or max(s_sec, s_pndp) < 1e-9, (u, s_sec, s_pndp)




def test_cyffers_bound_is_its_formula_term_by_term():
    """Theorem 11 of Cyffers et al. (corrected form) written out with explicit sums, on a path whose
    uniform W is row- but not column-stochastic (so column norms are not row norms), attacker at an end."""
    g = nx.path_graph(5)
    w = gossip_matrix(g)
    steps, alpha, sigma = 3, 3.0, 2.0
    closed = [0, 1]                                   # N[attacker 0]
    below_cap = 0
    for victim in (1, 2, 3, 4):
        total = 0.0
        for s in range(steps):
            ws = np.linalg.matrix_power(w, s)
            for j in closed:
                column_norm2 = sum(ws[i, j] ** 2 for i in range(5))
                total += (steps - s) * ws[victim, j] / column_norm2
        below_cap += total < steps
        expected = alpha / (2 * sigma ** 2) * min(steps, total)
        assert cyffers_rdp(w, g, victim, 0, steps, alpha, sigma) == pytest.approx(expected, rel=1e-12)
        assert cyffers_rdp(w, g, victim, 0, steps, alpha, sigma, clip=2.0) == pytest.approx(4 * expected, rel=1e-12)
    assert below_cap >= 2                             # the min(T, ·) cap does not hide the sum
    # T = 1: only W^0 = I, whose columns have norm 1: a neighbour loses α/(2σ²), a farther node nothing
    assert cyffers_rdp(w, g, 1, 0, 1) == pytest.approx(1.0)
    assert cyffers_rdp(w, g, 3, 0, 1) == 0.0


def test_pairwise_table_covers_every_attacker_and_keeps_cyffers_to_its_setting():
    g = nx.path_graph(4)
    w = gossip_matrix(g)
    t = pairwise_table(w, g, 2, sigma=1.5, alpha=3.0, delta=1e-5)
    assert t["attackers"] == [0, 1, 2, 3]                      # None: every node attacks in turn
    assert sorted((p["attacker"], p["victim"]) for p in t["pairs"]) == [
        (a, u) for a in range(4) for u in range(4) if u != a]
    assert (t["trust_model"], t["steps"], t["b"], t["alpha"], t["sigma"], t["delta"]) == ("pndp", 2, 1, 3.0, 1.5, 1e-5)
    assert all("cyffers_rdp" in p for p in t["pairs"]) and all("cyffers_rdp" in r for r in t["by_distance"])
    # the bound is stated for DP-D-SGD at user level without correlation and one gossip step only
    for other in ({"b": 2}, {"c_local": np.array([[1.0, 0.0], [-0.5, 1.0]])}, {"gossip_steps": 2}):
        t = pairwise_table(w, g, 2, attackers=[0], **other)
        assert not any("cyffers_rdp" in p for p in t["pairs"] + t["by_distance"]), other
    with pytest.raises(ValueError, match=r"^secldp needs secrets \(secret_scale > 0\); without them it is pndp$"):
        pairwise_table(w, g, 2, trust="secldp")


def test_victim_grams_fall_back_to_the_pseudo_inverse_when_observations_coincide(monkeypatch):
    """On the complete graph with W = J/n and K = 2 gossip messages, every sender's second message is
    the same average: the covariance is singular, Cholesky fails and the eigen-decomposition path must
    still equal the dense projector."""
    from scipy.linalg import eigh

    import fgx.privacy.mf.trust as trust_module
    g = nx.complete_graph(4)
    w = gossip_matrix(g)
    used = []
    monkeypatch.setattr(trust_module, "eigh", lambda *a, **k: used.append(1) or eigh(*a, **k))
    steps, n = 2, 4
    dense = knowledge_gram(w, steps, None, "pndp", [0], gossip_steps=2)
    fast = victim_grams(w, steps, None, [0], "pndp", gossip_steps=2)
    assert used
    for u, x in fast.items():
        cols = u + n * np.arange(steps)
        assert np.allclose(x, dense[np.ix_(cols, cols)], atol=1e-10)
    assert not np.allclose(fast[1], 0)


def test_accounting_cost_counts_the_received_rows_and_their_bytes():
    g = nx.path_graph(4)                               # attacker 0 hears node 1; attacker 1 hears 0 and 2
    w = gossip_matrix(g)
    one = accounting_cost(w, 3, [0], gossip_steps=2, edges=3)
    assert one == {"rows": 3 * 2 * 1, "bytes": 8 * (2 * 6 * 4 * 3 + 6 * 3 * 3 + 2 * 6 * 6)}
    assert accounting_cost(w, 3, [1])["rows"] == 3 * 1 * 2


def test_trust_and_workload_errors_name_the_problem():
    _, w = florentine()
    with pytest.raises(ValueError, match=r"^trust model must be one of \['ldp', 'pndp', 'secldp'\], got 'bogus'$"):
        victim_grams(w, 2, trust="bogus")
    with pytest.raises(ValueError, match=r"^gossip_steps > 1 is defined for the message workload \(initial_power 0\) only$"):
        dl_workload(w, 2, initial_power=1, gossip_steps=2)


# ---------------------------------------------------------------------------------- accounting pieces
@pytest.mark.parametrize("trust", ["pndp", "secldp"])
@pytest.mark.parametrize("gossip_steps", [1, 2])
@pytest.mark.parametrize("attackers", [[0], [2, 5]])
def test_victim_grams_equal_the_dense_projector(trust, gossip_steps, attackers):
    """The Schur-complement accountant (no nT x nT matrix) equals the paper's construction
    (B built densely, projector B^†B from an SVD) for a random correlation."""
    _, w = florentine()
    n, steps = w.shape[0], 4
    rng = np.random.default_rng(1)
    c = np.tril(rng.normal(size=(steps, steps))) + 3 * np.eye(steps)
    inc = oriented_incidence(w)
    dense = knowledge_gram(w, steps, c, trust, attackers, secrets=inc, gossip_steps=gossip_steps, secret_scale=0.5)
    fast = victim_grams(w, steps, c, attackers, trust, secrets=inc, secret_scale=0.5, gossip_steps=gossip_steps)
    assert sorted(fast) == [u for u in range(n) if u not in attackers]
    for u, x in fast.items():
        cols = u + n * np.arange(steps)
        assert np.allclose(x, dense[np.ix_(cols, cols)], atol=1e-10)


def test_sensitivity_bounds_are_upper_bounds_and_lambda_cap_binds():
    x = np.array([[1.0, 0.5, -0.5], [0.5, 1.0, 0.5], [-0.5, 0.5, 1.0]])
    assert pattern_bound(x, "abs_sum") == pytest.approx(6.0)
    lam = 3 * np.linalg.eigvalsh(x)[-1]
    assert lam < 6.0 and pattern_bound(x, "lambda_max") == pytest.approx(lam)
    assert pattern_bound(x, "abs_sum_capped") == pytest.approx(lam)      # the λ_max cap is what binds here
    assert pattern_bound(x) == pattern_bound(x, "abs_sum_capped")         # the default (spec's choice)
    # every bound is above the true sens² = max over unit-row Δ of tr(Δᵀ X Δ) (sampled, d = 5)
    rng = np.random.default_rng(0)
    for _ in range(2000):
        d = rng.normal(size=(3, 5))
        d /= np.linalg.norm(d, axis=1, keepdims=True)
        assert np.trace(d.T @ x @ d) <= pattern_bound(x, "abs_sum_capped") + 1e-9


def test_pndp_cap_at_ldp_and_lambda_max_on_florentine():
    g, w = florentine()
    capped = {r["distance"]: r["rdp"] for r in pndp_table(w, g, 10, 0)["by_distance"]}
    raw = {r["distance"]: r["rdp"] for r in pndp_table(w, g, 10, 0, bound="abs_sum")["by_distance"]}
    assert raw[1]["max"] == pytest.approx(10.911, abs=1e-3)       # the paper's uncapped bound exceeds LDP
    assert capped[1]["max"] == pytest.approx(10.0)
    for d in (2, 3, 4):                                            # further away the abs-sum bound is the smaller
        assert capped[d]["mean"] == pytest.approx(raw[d]["mean"], rel=1e-9)


def test_solver_status_is_honest():
    _, w = florentine()
    h = gossip_gram(w, 12)
    assert optimise_gram(h, 3, 4, max_iter=3).status == "max_iter"
    done = optimise_gram(h, 3, 4)
    assert done.status == "converged" and done.converged and done.grad_ratio < 1e-4
    floor = optimise_gram(h, 3, 4, max_iter=10_000, tol=1e-30)
    # tol 1e-30 cannot be met: the line search stops improving first, which is not convergence
    assert floor.status == "stalled" and not floor.converged and floor.grad_ratio < 1e-4


@pytest.mark.parametrize("b", [0, 5])
def test_participation_outside_one_to_t_is_refused(b):
    with pytest.raises(ValueError, match=rf"^participation b={b} must lie in \[1, T=4\]$"):
        local_patterns(4, b)


def test_build_correlation_solves_the_named_gram_with_the_given_tolerance():
    """Each optimised correlation factors the solver's answer for its own Gram (mafalda_message: the
    message workload, not the post-averaging one), with the caller's tolerance, and reports it."""
    _, w = florentine()
    k, b = 2, 3
    res = optimise_gram(gossip_gram(w, k * b, "message"), k, b, max_iter=500, tol=1e-3)
    corr = build_correlation("mafalda_message", w, k, b, max_iter=500, tol=1e-3)
    assert np.allclose(corr.c_local, lower_factor(res.x))
    assert corr.solver_report()["iterations"] == res.iterations
    tight = build_correlation("mafalda_message", w, k, b, max_iter=500, tol=1e-10)
    assert tight.iterations > corr.iterations                     # the tolerance reached the solver
    report = tight.solver_report()
    assert (report["status"], report["projected_gradient_ratio"]) == (tight.solver_status, tight.solver_grad_ratio)
    assert report["status"] in ("converged", "stalled", "max_iter") and report["projected_gradient_ratio"] > 0
    assert build_correlation("identity", w, k, b).solver_report()["status"] == "closed form"
    with pytest.raises(ValueError, match=r"^unknown correlation 'x'; known: \['identity', 'antipgd', 'dmf', "
                                         r"'mafalda', 'mafalda_message'\]$"):
        build_correlation("x", w, k, b)


def test_mf_gdp_correlation_choice_errors_name_key_value_and_remedy():
    from fgx.config import ConfigError
    from fgx.privacy.mf_gdp import MFGDPParams, resolve_correlation
    with pytest.raises(ConfigError) as err:
        resolve_correlation(MFGDPParams(), "dsgd", None)
    assert (err.value.key, err.value.value) == ("privacy.name", "mf_gdp") and "use privacy=none" in err.value.allowed
    with pytest.raises(ConfigError) as err:
        resolve_correlation(MFGDPParams(correlation="auto"), "mf_dsgd", "privacy")
    assert (err.value.key, err.value.value) == ("privacy.correlation", "auto")
    assert err.value.allowed.startswith("one of ['identity', 'antipgd', 'dmf', 'mafalda', 'mafalda_message']")
    assert resolve_correlation(MFGDPParams(correlation="dmf"), "mf_dsgd", "privacy") == "dmf"
    assert resolve_correlation(MFGDPParams(), "dp_dsgd", "identity") == "identity"


def test_vectorised_epsilon_matches_opacus_and_dp_accounting():
    import dp_accounting
    mus = [0.05, 0.3, 1.0, 2.5, 7.0]
    many = eps_from_mu_many(mus, 1e-6)
    for m, e in zip(mus, many):
        assert e == pytest.approx(eps_from_mu(m, 1e-6), abs=1e-9)
        assert e == pytest.approx(dp_accounting.get_epsilon_gaussian(1.0 / m, 1e-6), rel=1e-4)
    assert eps_from_mu_many([0.0], 1e-6)[0] == 0.0


# ---------------------------------------------------------------------------------- the mechanism
class _Ctx:
    seed = 3
    import logging
    log = logging.getLogger("test")


def _bound_mechanism(correlation_of_algo, steps_k, steps_b, dim, n_graph="path", **params):
    import networkx as nx
    from fgx.config import build_params
    from fgx.decentral.topology import gossip_matrix
    from fgx.privacy.mf_gdp import GossipRelease, MFGDP, MFGDPParams

    g = nx.path_graph(3) if n_graph == "path" else nx.complete_graph(3)
    mech = MFGDP(build_params(MFGDPParams, params, "privacy"))
    mech.bind(_Ctx())
    mech.bind_gossip(GossipRelease(graph=g, w=gossip_matrix(g), k=steps_k, b=steps_b, gossip_steps=1, dim=dim,
                                   lr=1.0, gradient_sensitivity=0.5), "test_algo", correlation_of_algo)
    return mech


@pytest.mark.parametrize("correlation", ["identity", "antipgd", "mafalda"])
def test_released_noise_has_the_calibrated_correlated_covariance(correlation):
    """Statistical test of what leaves a node: over many coordinates, the noise added to its T
    messages has covariance (Δσ)²·C^{-1}C^{-T} with σ = sqrt(sens²)/μ, and nodes share none."""
    import torch
    k, b, dim, mu = 2, 3, 40_000, 2.0
    mech = _bound_mechanism(correlation, k, b, dim, mu=mu)
    from fgx.privacy.mf.correlations import build_correlation
    from fgx.decentral.topology import gossip_matrix
    import networkx as nx
    corr = build_correlation(correlation, gossip_matrix(nx.path_graph(3)), k, b, 2000, 1e-8)
    steps = k * b
    zero = torch.zeros(dim, dtype=torch.float64)
    noise = {u: torch.stack([-mech.release("model", zero, src=u, round=t + 1) for t in range(steps)]).numpy()
             for u in (0, 1)}
    assert mech.release("model_averaged", zero, src=0, round=1) is zero      # post-processing: untouched
    std = 0.5 * np.sqrt(local_sens2(corr.c_local, b)) / mu
    want = std ** 2 * corr.noise_mixer @ corr.noise_mixer.T
    emp = noise[0] @ noise[0].T / dim
    assert np.abs(emp - want).max() < 0.05 * np.abs(want).max()
    assert np.abs(noise[0] @ noise[1].T / dim).max() < 0.05 * np.abs(want).max()
    # repeated release of the same (node, step) gives the same message: receivers and sender agree
    assert torch.equal(mech.release("model", zero, src=1, round=steps), mech.release("model", zero, src=1, round=steps))


def test_decor_secrets_cancel_between_the_two_ends_of_an_edge():
    import torch
    dim = 40_000
    mech = _bound_mechanism("identity", 1, 1, dim, trust_model="secldp", secret_scale=2.0)
    zero = torch.zeros(dim, dtype=torch.float64)
    a, b = (-mech.release("model", zero, src=u, round=1).numpy() for u in (0, 1))
    std = 0.5 * 1.0                          # Δ σ with sens² = 1, μ = 1
    assert np.mean(a * b) == pytest.approx(-(2.0 * std) ** 2, rel=0.05)      # edge (0, 1): +s at 0, -s at 1
    assert np.mean(a * a) == pytest.approx(std ** 2 * (1 + 4.0), rel=0.05)


# ---------------------------------------------------------------------------------- runs
DECENTRAL = ["dataset=diabetes", "partitioner=topology", "partitioner.graph=florentine", "model=mlp_tabular",
             "model.hidden=8", "algorithm.k=2", "algorithm.b=2", "rounds=4", "eval_every=4", "output.progress=off"]


def _json(path):
    import json
    return json.loads(path.read_text())


def test_dp_dsgd_run_counts_gossip_messages_and_accounts(run_fgx):
    rd = run_fgx("algorithm=dp_dsgd", "privacy=mf_gdp", "privacy.mu=1.0", *DECENTRAL)
    summ = _json(rd / "summary.json")
    assert summ["status"] == "completed" and summ["final"]["mse"] == summ["final"]["mse"]
    comm = _json(rd / "comm.json")
    g = build_graph(TopologyParams(graph="florentine"))
    assert comm["messages"]["model"] == 2 * g.number_of_edges() * 4
    acc = _json(rd / "privacy.json")
    assert acc["noise"]["sens2_ldp"] == pytest.approx(2.0) and acc["epsilon"] == pytest.approx(4.8866, abs=1e-3)
    assert summ["privacy"]["epsilon"] == acc["epsilon"] and acc["trust_model"] == "ldp"
    # the noise reaches the models: at μ = 0.001 the nodes are far from the noise-free run, so far that the
    # run ends diverged (fgx/divergence.py: exit 1, its last scored round kept)
    clean = _json(run_fgx("algorithm=dsgd", *DECENTRAL) / "summary.json")["final"]["mse"]
    loud = _json(run_fgx("algorithm=dp_dsgd", "privacy=mf_gdp", "privacy.mu=0.001", *DECENTRAL, expect_rc=1)
                 / "summary.json")
    assert loud["status"] == "diverged" and loud["final"]["mse"] > 10 * clean


def test_noise_free_dsgd_is_deterministic_and_rounds_are_checked(run_fgx):
    a = _json(run_fgx("algorithm=dsgd", *DECENTRAL) / "summary.json")["final"]["mse"]
    b = _json(run_fgx("algorithm=dsgd", *DECENTRAL) / "summary.json")["final"]["mse"]
    assert a == b
    with pytest.raises(SystemExit, match="rounds"):
        run_fgx("algorithm=mafalda_sgd", "privacy=mf_gdp", *DECENTRAL[:-2], "rounds=5")


@pytest.mark.parametrize("overrides,key", [
    (["algorithm=dp_dsgd", "privacy=none"], "privacy"),                       # noisy variant without mf_gdp
    (["algorithm=dsgd", "privacy=mf_gdp"], "privacy"),                        # baseline with a mechanism
    (["algorithm=mafalda_sgd", "privacy=mf_gdp", "privacy.correlation=identity"], "privacy.correlation"),
    (["algorithm=mf_dsgd", "privacy=mf_gdp"], "privacy.correlation"),         # MF-D-SGD names its correlation
    (["algorithm=dp_dsgd", "privacy=mf_gdp", "privacy.trust_model=secldp"], "privacy.secret_scale"),
    (["algorithm=dp_dsgd", "privacy=mf_gdp", "privacy.trust_model=pndp", "privacy.attackers=[15]"], "privacy.attackers"),
    (["algorithm=dp_dsgd", "privacy=mf_gdp", "privacy.trust_model=pndp", "privacy.attackers=[]"], "privacy.attackers"),
    (["algorithm=dp_dsgd", "privacy=mf_gdp", "privacy.trust_model=pndp", "privacy.max_accounting_gb=0.000001"],
     "privacy.trust_model"),
    (["algorithm=fedavg", "privacy=mf_gdp", "dataset=csbm", "partitioner=random", "model=gcn"], "privacy.name"),
])
def test_mf_gdp_refuses_inconsistent_configs_before_work(run_fgx, overrides, key):
    base = [] if "algorithm=fedavg" in overrides else DECENTRAL
    with pytest.raises(SystemExit, match=key.replace(".", r"\.")):
        run_fgx(*base, *overrides)


def _cli_json(capsys, *args):
    import json
    from fgx.cli import main
    capsys.readouterr()
    assert main(["privacy", "pndp", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("trust,extra", [("pndp", []), ("secldp", ["privacy.secret_scale=0.5"])])
def test_run_pairwise_loss_equals_fgx_privacy_pndp(run_fgx, capsys, trust, extra):
    """privacy.json of a MAFALDA-SGD run under PNDP / SecLDP holds the same per-pair table as
    `fgx privacy pndp` for the same graph, T, correlation and participation."""
    rd = run_fgx("algorithm=mafalda_sgd", "privacy=mf_gdp", f"privacy.trust_model={trust}", "privacy.mu=0.7", *extra,
                 *DECENTRAL)
    acc = _json(rd / "privacy.json")
    cli = _cli_json(capsys, "--graph", "florentine", "--k", "2", "--b", "2", "--correlation", "mafalda", "--mu", "0.7",
                    "--attackers", "all", "--trust-model", trust, *(["--secret-scale", "0.5"] if extra else []))
    assert acc["trust_model"] == trust and acc["participation"] == {"kind": "record", "k": 2, "b": 2, "steps": 4}
    run_pairs = {(p["victim"], p["attacker"]): p for p in acc["pairs"]}
    cli_pairs = {(p["victim"], p["attacker"]): p for p in cli["pairs"]}
    assert run_pairs.keys() == cli_pairs.keys() and len(run_pairs) == 15 * 14
    for key, p in run_pairs.items():
        assert p["sens2"] == pytest.approx(cli_pairs[key]["sens2"], rel=1e-9, abs=1e-12)
        assert p["epsilon"] == pytest.approx(cli_pairs[key]["epsilon"], rel=1e-9, abs=1e-12)
    # the run's headline is its worst pair; far pairs are much better protected than under LDP
    assert acc["epsilon"] == pytest.approx(max(p["epsilon"] for p in acc["pairs"]))
    assert acc["epsilon"] <= acc["ldp"]["epsilon"] + 1e-9
    far = [p for p in acc["pairs"] if p["distance"] >= 3]
    assert max(p["epsilon"] for p in far) < 0.2 * acc["ldp"]["epsilon"]


def test_run_user_level_pndp_of_dp_dsgd_is_fig2(run_fgx, capsys):
    """participation=user with DP-D-SGD is Fig. 2's setting: the run's attacker-0 table by distance is
    the command's default output (σ from μ)."""
    rd = run_fgx("algorithm=dp_dsgd", "privacy=mf_gdp", "privacy.trust_model=pndp", "privacy.participation=user",
                 "privacy.attackers=[0]", "privacy.mu=2.0", *DECENTRAL)
    acc = _json(rd / "privacy.json")
    cli = _cli_json(capsys, "--graph", "florentine", "--steps", "4", "--sigma", str(np.sqrt(4) / 2.0))
    assert acc["noise"]["sens2_ldp"] == pytest.approx(4.0)
    for key in ("min", "mean", "max"):
        assert [r["rdp"][key] for r in acc["by_distance"]] == pytest.approx([r["rdp"][key] for r in cli["by_distance"]])


def test_muffliato_pndp_counts_the_averaged_messages(run_fgx):
    """K = 2 gossip steps: the later message is post-processing under LDP (same ε) but under PNDP the
    attacker also receives its neighbours' averages, so every pair loses at least as much privacy."""
    base = ["algorithm=muffliato", "privacy=mf_gdp", "privacy.trust_model=pndp", "privacy.attackers=[0]", *DECENTRAL]
    one = _json(run_fgx(*base, "algorithm.gossip_steps=1") / "privacy.json")
    two = _json(run_fgx(*base, "algorithm.gossip_steps=2") / "privacy.json")
    comm = _json(run_fgx(*base, "algorithm.gossip_steps=2") / "comm.json")
    assert comm["messages"]["model_averaged"] == comm["messages"]["model"]
    assert one["ldp"]["epsilon"] == two["ldp"]["epsilon"]
    s1 = {p["victim"]: p["sens2"] for p in one["pairs"]}
    s2 = {p["victim"]: p["sens2"] for p in two["pairs"]}
    assert all(s2[u] >= s1[u] - 1e-12 for u in s1) and any(s2[u] > s1[u] * 1.01 for u in s1)


def test_per_sample_clipping_bounds_each_gradient():
    import torch
    from fgx.decentral.runtime import clip_and_average
    g = torch.randn(3, 7, 5) * 10
    out = clip_and_average(g, 1.0)
    assert (out.norm(dim=-1) <= 1.0 + 1e-5).all()
    small = torch.full((1, 2, 4), 0.01)
    assert torch.allclose(clip_and_average(small, 1.0), small.mean(1))


# ---------------------------------------------------------------------------------- data
def test_synthetic_regression_is_housing_shaped_and_fixed_across_seeds():
    from fgx.data.base import DataEnv
    from fgx.data.tabular import SyntheticRegressionParams, load_synthetic_regression
    import logging
    env = lambda s: DataEnv(data_dir=None, seed=s, log=logging.getLogger("t"))   # noqa: E731
    a = load_synthetic_regression(SyntheticRegressionParams(), env(0))
    b = load_synthetic_regression(SyntheticRegressionParams(), env(1))
    assert tuple(a.data.x.shape) == (20640, 8) and int(a.data.train_mask.sum()) == 16512
    assert a.info.source == "generated" and a.info.task == "regression"
    assert not np.array_equal(a.data.train_mask.numpy(), b.data.train_mask.numpy())      # the split follows the seed
    ya, yb = np.sort(a.data.y.numpy()), np.sort(b.data.y.numpy())
    assert np.array_equal(ya, yb)                                                          # the rows do not
    assert 1.9 < ya.mean() < 2.25 and 1.0 < ya.std() < 1.3                                 # Housing's scale


def test_topology_partition_gives_every_node_the_same_training_rows():
    import torch
    from types import SimpleNamespace
    from fgx.partition.topology import topology_partition
    train = torch.zeros(442, dtype=torch.bool)
    train[torch.randperm(442, generator=torch.Generator().manual_seed(0))[:353]] = True
    parts = topology_partition(TopologyParams(graph="florentine"), SimpleNamespace(num_nodes=442, train_mask=train),
                               None, 0)
    counts = [int(train[p].sum()) for p in parts]
    assert max(counts) - min(counts) <= 1 and sum(len(p) for p in parts) == 442
    assert len(torch.cat(parts).unique()) == 442


def test_noise_stream_is_the_same_after_a_restart_mid_block():
    """Resume replays the stream from the seed: the noise of step t is the same whether the stream ran
    from step 0 or restarted at t (blocks aligned), for a dense MAFALDA-like mixer and DECOR secrets."""
    import torch
    from fgx.privacy.mf.noise import GossipNoise
    rng = np.random.default_rng(0)
    mixer = np.tril(rng.normal(size=(40, 40)))
    inc = oriented_incidence(florentine()[1])
    a = GossipNoise(mixer, 15, 7, 0.3, seed=5, incidence=inc, secret_scale=0.5, block=8)
    full = [a.step(t) for t in range(40)]
    b = GossipNoise(mixer, 15, 7, 0.3, seed=5, incidence=inc, secret_scale=0.5, block=8)
    b.step(3)
    b.restart()
    for t in (13, 14, 37):
        assert torch.equal(b.step(t), full[t])
    want = sum(mixer[20, j] * a.z[j] for j in range(21)) + a.secret_rows[20]
    assert torch.allclose(full[20], want.float(), atol=1e-5)


def test_the_best_round_of_a_regression_run_minimises_mse(run_fgx):
    """mse is lower-is-better: summary.json's best round is the one with the smallest mse (a `>`
    comparison kept the worst round), and the per-client best rounds likewise."""
    d = run_fgx("algorithm=dsgd", "privacy=none", *DECENTRAL, "eval_every=1", "algorithm.lr=0.5")
    s = json.loads((d / "summary.json").read_text())
    split = "val" if '"split": "val"' in (d / "metrics.jsonl").read_text() else "test"
    rows = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
    mses = {r["round"]: r["mean"]["mse"] for r in rows if r["split"] == split}
    assert len(set(mses.values())) > 1
    assert s["best"]["round"] == min(mses, key=mses.get) and s["best"]["val"] == min(mses.values())


def test_mf_gdp_without_gossip_reports_that_nothing_was_released():
    from fgx.config import build_params
    from fgx.privacy.mf_gdp import MFGDP, MFGDPParams
    mech = MFGDP(build_params(MFGDPParams, {}, "privacy"))
    mech.bind(_Ctx())
    assert mech.report() == {"mechanism": "mf_gdp", "note": "no gossip messages were released"}
    assert mech.on_round_end(1) == {}
    assert mech.headline()["mechanism"] == "mf_gdp" and mech.headline()["epsilon"] is None


def test_mf_gdp_account_names_what_it_covers_and_replace_one_doubles_the_sensitivity():
    zero_out = _bound_mechanism("identity", 2, 1, 4, mu=1.0)
    a = zero_out.report()
    assert (a["mechanism"], a["algorithm"], a["correlation"], a["trust_model"], a["neighbouring"]) == (
        "mf_gdp", "test_algo", "identity", "ldp", "zero_out")
    assert a["noise"]["record_sensitivity"] == 0.5                   # the gradient sensitivity itself
    replace = _bound_mechanism("identity", 2, 1, 4, mu=1.0, neighbouring="replace_one").report()
    assert replace["noise"]["record_sensitivity"] == 1.0             # two records differ: 2 x 0.5
    assert replace["noise"]["std_per_coordinate"] == pytest.approx(2 * a["noise"]["std_per_coordinate"])
    assert set(a) == {"mechanism", "algorithm", "correlation", "trust_model", "participation", "neighbouring",
                      "sens_bound", "gossip_steps", "noise", "ldp", "surrogate_objective", "solver", "mu",
                      "epsilon", "delta"}
    assert set(a["noise"]) == {"sens2_ldp", "noise_multiplier", "record_sensitivity", "std_per_coordinate",
                               "secret_scale", "message_std_per_coordinate"}
    assert (a["mu"], a["epsilon"]) == (1.0, a["ldp"]["epsilon"])       # ldp: the run's μ is the LDP μ
    # pndp with DECOR secrets: the worst pair sets μ and ε, and the report says the secrets were ignored
    pndp = _bound_mechanism("identity", 2, 1, 4, mu=1.0, trust_model="pndp", secret_scale=1.0).report()
    worst = max(pndp["pairs"], key=lambda q: q["sens2"])
    assert pndp["worst_pair"] == worst and (pndp["mu"], pndp["epsilon"]) == (worst["mu"], worst["epsilon"])
    assert pndp["mu"] <= 1.0 and "ignores the DECOR secrets" in pndp["note"]
    h = zero_out.headline()
    assert (h["mechanism"], h["trust_model"], h["correlation"], h["epsilon"], h["epsilon_ldp"]) == (
        "mf_gdp", "ldp", "identity", a["epsilon"], a["ldp"]["epsilon"])
    assert h["epsilon_ldp"] > 0


# ---------------------------------------------------------------------------- from mutation testing
def test_pairwise_table_capped_bounds_stay_below_ldp_and_raw_ones_need_not():
    g, w = florentine()
    capped = pairwise_table(w, g, 10, attackers=[0])
    raw = pairwise_table(w, g, 10, attackers=[0], bound="abs_sum")
    ldp = capped["ldp"]["sens2"]
    assert max(p["sens2"] for p in capped["pairs"]) <= ldp * (1 + 1e-12)
    assert max(p["sens2"] for p in raw["pairs"]) > ldp * 1.05       # the cap binds somewhere


def test_pairwise_table_accounts_the_given_correlation():
    """Each pair's sens² is the largest pattern bound of the victim's Gram under C (capped at C's LDP
    value), not under the identity."""
    g, w = florentine()
    steps = 4
    c = np.tril(np.random.default_rng(2).normal(size=(steps, steps))) + 3 * np.eye(steps)
    t = pairwise_table(w, g, steps, c_local=c, attackers=[0])
    ldp_gram = c.T @ c
    grams = victim_grams(w, steps, c, [0])
    patterns = local_patterns(steps, 1)
    for p in t["pairs"]:
        x = grams[p["victim"]]
        want = max(min(pattern_bound(x[np.ix_(q, q)]), pattern_bound(ldp_gram[np.ix_(q, q)])) for q in patterns)
        assert p["sens2"] == pytest.approx(want, rel=1e-9)
    plain = pairwise_table(w, g, steps, attackers=[0])
    assert any(abs(a["sens2"] - b["sens2"]) > 1e-3 for a, b in zip(t["pairs"], plain["pairs"]))


def test_knowledge_gram_gives_the_attackers_own_gradients_no_weight_and_names_missing_secrets():
    _, w = florentine()
    n, steps = w.shape[0], 3
    for trust, extra in (("pndp", {}), ("secldp", {"secrets": oriented_incidence(w)})):
        x = knowledge_gram(w, steps, None, trust, [0, 4], **extra)
        assert np.isfinite(x).all()
        for a in (0, 4):
            own = a + n * np.arange(steps)
            assert np.abs(x[own, :]).max() == 0.0 and np.abs(x[:, own]).max() == 0.0   # Lemma 11
    with pytest.raises(ValueError, match=r"^secldp needs the oriented incidence matrix of the secrets$"):
        knowledge_gram(w, steps, None, "secldp", [0])


def test_ldp_victim_grams_without_a_correlation_are_the_identity():
    _, w = florentine()
    grams = victim_grams(w, 3, None, [0], "ldp")
    assert len(grams) == w.shape[0] - 1 and all(np.array_equal(x, np.eye(3)) for x in grams.values())


def test_victim_sens2_uses_the_bound_it_is_given():
    from fgx.privacy.mf.participation import node_patterns
    _, w = florentine()
    n, steps = w.shape[0], 10
    x = knowledge_gram(w, steps, None, "pndp", [0])
    capped, raw = victim_sens2(x, n, steps, 1, 1, "abs_sum_capped"), victim_sens2(x, n, steps, 1, 1, "abs_sum")
    assert raw == pytest.approx(sens2_from_gram(x, node_patterns(n, steps, 1, 1), "abs_sum"))
    assert raw > capped


def test_projector_rank_is_relative_to_the_largest_singular_value():
    from fgx.privacy.mf.sensitivity import projector
    rng = np.random.default_rng(0)
    u, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    v, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    b = u @ np.diag([1e6, 1.0, 1e-7]) @ v.T        # 1e-7 < 1e-10 · 3 · 1e6: numerically rank 2
    p = projector(b)
    assert np.trace(p) == pytest.approx(2.0) and np.allclose(p, v[:, :2] @ v[:, :2].T, atol=1e-8)


def test_solver_reports_its_objective_and_iterations_and_uses_curvature():
    _, w = florentine()
    h = gossip_gram(w, 12)
    short = optimise_gram(h, 3, 4, max_iter=3)
    assert short.iterations == 3 and short.status == "max_iter"
    done = optimise_gram(h, 3, 4)
    assert done.objective == pytest.approx(float(np.sum(h * np.linalg.inv(done.x))), rel=1e-12)
    # the one-pair L-BFGS direction: 36 iterations here (measured), more than 80 with a wrong pair
    assert done.iterations < 50


def test_mf_gdp_uses_the_configured_solver_tolerance_and_reports_the_largest_message_std():
    import networkx as nx
    from fgx.decentral.topology import gossip_matrix
    from fgx.privacy.mf.correlations import build_correlation

    loose = _bound_mechanism("mafalda", 2, 3, 4, mu=1.0, solver_tol=1e-3).report()
    want = build_correlation("mafalda", gossip_matrix(nx.path_graph(3)), 2, 3, 10_000, 1e-3)
    assert loose["solver"]["iterations"] == want.iterations
    assert want.iterations < build_correlation("mafalda", gossip_matrix(nx.path_graph(3)), 2, 3, 10_000, 1e-8).iterations
    # the std of one message coordinate: lr · std · the largest row norm of the noise mixer
    noise = loose["noise"]
    row_norm = float(np.sqrt((want.noise_mixer ** 2).sum(1)).max())
    assert noise["message_std_per_coordinate"] == pytest.approx(1.0 * noise["std_per_coordinate"] * row_norm)


def test_mf_gdp_correlation_and_bound_errors_name_key_value_and_remedy():
    from fgx.config import ConfigError
    from fgx.privacy.mf_gdp import MFGDPParams, resolve_correlation
    with pytest.raises(ConfigError) as err:
        resolve_correlation(MFGDPParams(correlation="identity"), "mafalda_sgd", "mafalda")
    assert (err.value.key, err.value.value) == ("privacy.correlation", "identity")
    assert err.value.allowed == ("auto or 'mafalda' with algorithm=mafalda_sgd (its correlation); for another one "
                                 "use algorithm=mf_dsgd privacy.correlation=identity")
    with pytest.raises(ValueError, match=r"^sens_bound must be one of \['abs_sum_capped', 'abs_sum', 'lambda_max'\], "
                                         r"got 'bogus'$"):
        pattern_bound(np.eye(2), "bogus")
