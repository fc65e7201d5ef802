"""No release outside the certificate: over hundreds of requests on real Cora and on a generated graph the
released model's bound never exceeds the budget, a retraining re-propagates exactly (residues reset) and
trains from scratch so the bound restarts near zero, the float32 rounding of the state is bounded inside
the accountant, and a run whose certificate would fail says so."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from fgx.unlearning.certified import PartyState
from fgx.unlearning.propagation import GPRPropagator, exact_propagation, scaled_product, symmetric_adjacency
from test_unlearning import build_server, certified, processor


def generated_party(n=400, f=8, classes=3, seed=0) -> PartyState:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    x = rng.normal(size=(n, f)) + 1.5 * np.eye(classes, f)[y]
    ei = rng.integers(0, n, (2, 6 * n))
    ei = ei[:, (y[ei[0]] == y[ei[1]]) | (rng.random(ei.shape[1]) < 0.3)]
    order = rng.permutation(n)
    masks = {s: np.zeros(n, bool) for s in ("train", "val", "test")}
    masks["train"][order[:n // 2]] = True
    masks["val"][order[n // 2:3 * n // 4]] = True
    masks["test"][order[3 * n // 4:]] = True
    return PartyState(0, ei, x, y, masks)


def approximation_now(server) -> float:
    """Theorem 1's approximation term, recomputed independently: s from the embedding error of the training
    rows against float64 exact propagation of the features (the s the state bounds from above), then
    c1 ||s|| + gamma1 ||Z_train|| |w|^T s + training residual."""
    s, z = 0.0, []
    for p in server.parties:
        ids = p.train_ids()
        exact = exact_propagation(p.prop.adj, p.current_features(), p.prop.weights, p.prop.deg, dtype=np.float64)
        s = s + np.abs(exact[ids] - p.prop.rows(ids)).sum(0)
        z.append(p.prop.rows(ids))
    top = np.linalg.norm(np.vstack(z), 2)
    return float((np.linalg.norm(s) + 0.25 * top * (np.abs(server.W) * s[:, None]).sum(0) + server.train_residual).max())


def check_rows(rows, budget):
    """Every released model within the budget, near its edge, and every retraining a reset."""
    bounds = np.array([r["bound"] for r in rows])
    assert np.all(bounds <= budget), (bounds.max(), budget)
    assert all(r["within_budget"] and r["released"] for r in rows)
    assert bounds.max() > 0.8 * budget                     # the test runs close to the edge
    retrains = [r for r in rows if r["action"] == "retrain"]
    assert len(retrains) >= 2
    for r in retrains:
        assert r["step_bound"] > budget                   # retraining only where the step would not fit
        assert r["residue_norm_after_retrain"] == 0.0     # exact re-propagation: no residue left
        assert r["bound"] < 0.25 * budget                 # the bound restarts near zero
    newton = [r for r in rows if r["action"] == "newton"]
    assert all(r["bound"] == r["step_bound"] for r in newton)


def test_generated_graph_200_requests_never_outside_the_certificate():
    server = build_server([generated_party()], noise_std=0.1, r_max=1e-5, dtype="float32")
    budget = 0.02
    proc = processor(server, budget=budget, **{"report.bounds": True})
    rng = np.random.default_rng(1)
    rows, draws = [], server.noise_draws
    for i in range(200):
        row = proc.process({0: server.parties[0].prop.sample_edges(1, rng)}, evaluate=False)
        rows.append(row)
        # the bound covers what the state holds now, and the true gradient norm on exact embeddings
        assert row["bound"] >= approximation_now(server) * (1 - 1e-9)
        assert row["true_norm"] <= row["bound"]
    check_rows(rows, budget)
    assert max(r["rounding_term"] for r in rows) > 0
    # each retraining draws a fresh b (a model trained on D' has its own noise), never the released models' b
    assert server.noise_draws == draws + sum(r["action"] == "retrain" for r in rows)


def test_cora_220_requests_never_outside_the_certificate(run_fgx, data_root):
    run = run_fgx("dataset=cora", f"data_dir={data_root}", "partitioner=random", "partitioner.num_clients=1",
                  "algorithm=certified_lr", "rounds=1", "unlearning=scalegun", "unlearning.requests.num_requests=220", "unlearning.eval_every=220",
                  "unlearning.mia=false", "unlearning.attacks=false")
    out = json.loads((run / "unlearning.json").read_text())
    rows, budget = out["requests"], out["budget"]
    assert len(rows) == 220 and budget == pytest.approx(0.0228, abs=1e-4)
    check_rows(rows, budget)
    s = out["summary"]
    assert not s["certificate_failed"] and s["requests_outside_budget"] == 0
    assert s["max_released_bound"] <= budget and s["actions_retrain"] == s["retrain_count"] >= 2
    assert 0 < s["max_rounding_term"] < budget and out["setup"]["initial_rounding_term"] > 0
    assert all(r["rounding_term"] > 0 for r in rows)       # float32: the rounding term is in every bound


def level_defects(prop, x):
    """Per level, R* - R: R* the residues for which Lemma 3.2 holds exactly for the stored reserves
    (R*[0] = D^1/2 X - Q[0], R*[l] = A D^-1 Q[l-1] - Q[l], the last level included; a float64 pass)."""
    yield np.sqrt(prop.deg)[:, None] * x - prop.Q[0] - prop.R[0].dense()
    prev = prop.Q[0].astype(np.float64)
    for lvl in range(1, prop.L + 1):
        cur = prop.Q[lvl].astype(np.float64)
        d = scaled_product(prop.adj, prev, 1.0 / prop.deg) - cur
        yield d - prop.R[lvl].dense() if lvl < prop.L else d
        prev = cur


def implied_defect(prop, x) -> np.ndarray:
    """Per column sum_u |R*(u) - R(u)| over the levels."""
    return sum(np.abs(d).sum(0) for d in level_defects(prop, x))


def drifting_state(dtype, seed):
    rng = np.random.default_rng(seed)
    n, f = 2000, 12
    x = rng.normal(size=(n, f)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1).max()
    prop = GPRPropagator(symmetric_adjacency(rng.integers(0, n, (2, 12000)), n), x, [0.1, 0.3, 0.6], 1e-4, dtype)
    return prop, x.astype(np.float64), rng


def remove_some(prop, x_now, rng, step):
    """Edges at every step; a node's features and a whole node every tenth step."""
    prop.remove_edges(prop.sample_edges(1 + step % 3, rng))
    if step % 10 == 9:
        nodes = rng.choice(prop.n, 2, replace=False)
        prop.remove_node_features(nodes[:1])
        prop.remove_nodes(nodes[1:])
        x_now[nodes] = 0.0


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_rounding_bound_covers_the_state_drift(dtype):
    prop, x_now, rng = drifting_state(dtype, 0)
    # the initial push's share is checked first; then only what the requests add is counted from zero,
    # against what their roundings add to the drift (defects are never amplified, so they add up)
    start = implied_defect(prop, x_now)
    assert np.all(start <= prop.rounding_bound())
    prop.rounding[:] = 0.0
    checks = []
    for step in range(40):
        remove_some(prop, x_now, rng, step)
        if step % 10 == 0 or step == 39:
            checks.append((implied_defect(prop, x_now), prop.rounding_bound().copy()))
    for defect, bound in checks:
        assert np.all(defect <= start + bound)
    assert np.any(checks[-1][0] > start)                     # the requests added a drift to cover
    if dtype == "float32":
        assert checks[-1][1].max() < 1e-3 * np.abs(prop.Q).sum(axis=(0, 1)).max()   # and the bound is usable
    prop.repropagate(x_now)                                  # exact re-propagation resets it
    assert prop.stored_residue_rows() == 0 and np.all(implied_defect(prop, x_now) <= prop.rounding_bound())


def test_enforce_false_reports_every_release_outside_the_budget():
    server = build_server([generated_party(seed=2)], noise_std=0.1, r_max=1e-5)
    proc = processor(server, budget=1e-6, **{"certificate.enforce": False})
    rows = [proc.process({0: server.parties[0].prop.sample_edges(1, np.random.default_rng(j))}) for j in range(3)]
    assert all(r["action"] == "newton" and not r["within_budget"] and r["bound"] > 1e-6 for r in rows)
    assert proc.retrains == 0


def test_request_refused_when_even_a_retrained_model_is_outside_the_budget():
    server = build_server([generated_party(seed=3)], noise_std=0.1, r_max=1e-5)
    w0 = server.W.copy()
    proc = processor(server, budget=1e-14)        # below the training residual of any trained model
    row = proc.process({0: server.parties[0].prop.sample_edges(1, np.random.default_rng(0))})
    assert row["action"] == "refused" and not row["released"] and proc.failed
    assert not np.allclose(server.W, w0)          # it was retrained (exactly), and still not certifiable


def test_run_with_enforced_zero_budget_is_refused_before_work(run_fgx, tiny_cfg):
    with pytest.raises(SystemExit, match="unlearning.certificate.enforce.*noise_std = 0"):
        run_fgx(*certified(tiny_cfg), "unlearning=scalegun", "algorithm.noise_std=0")


def test_run_log_and_summary_say_when_the_certificate_fails(run_fgx, tiny_cfg):
    run = run_fgx(*certified(tiny_cfg), "unlearning=scalegun", "unlearning.requests.num_requests=3",
                  "algorithm.noise_std=1e-12", "unlearning.mia=false", "unlearning.attacks=false")
    out = json.loads((run / "unlearning.json").read_text())
    s = out["summary"]
    assert s["certificate_failed"] and s["requests"] < s["requests_planned"] == 3
    assert "certificate failed" in (run / "fgx.log").read_text()
    assert json.loads((run / "summary.json").read_text())["unlearning"]["certificate_failed"]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_implied_residue_sums_are_kept_exactly(dtype):
    """sum_l 1^T R* = 1^T D^1/2 X - 1^T Q[L] is maintained in O(touched) per removal and equals a float64
    recomputation of the residues the stored reserves imply, to float64 rounding; in float32 it differs
    from the tracked 1^T R by the state's drift, which the accountant adds."""
    prop, x_now, rng = drifting_state(dtype, 5)
    for step in range(30):
        remove_some(prop, x_now, rng, step)
    implied = sum(d.sum(0) for d in level_defects(prop, x_now)) + prop.residue_colsum()
    scale = np.abs(implied).max()
    assert np.all(np.abs(prop.implied_residue_colsum() - implied) <= prop.implied_residue_error() + 1e-12 * scale)
    drift = np.abs(prop.implied_residue_colsum() - prop.residue_colsum()).max()
    assert (drift > 1e-6 * scale) if dtype == "float32" else (drift < 1e-9 * scale)


# -- solver=factored: the anchor Hessian's factors, the changed rows' corrections, the drift bound ---------
def test_factored_operator_and_drift_bound():
    """H_A is the Hessian at the anchor W0 on the current data (only the changed rows corrected), and the
    certificate's drift term bounds what it leaves out of the Hessian at the current W."""
    from fgx.unlearning.logreg import LocalData, signed_labels
    server = build_server([generated_party(n=1500, f=8, seed=7)], noise_std=0.0, r_max=1e-9, lam=1e-3)
    proc = processor(server, **{"certificate.include_train_residual": False, "solver": "factored",
                                "certificate.enforce": False})
    party, rng = server.parties[0], np.random.default_rng(0)
    drifts = []
    for j in range(6):
        row = proc.process({0: party.prop.sample_edges(1, rng)})
        fh = server.factored
        v = np.random.default_rng(j).normal(size=server.W.shape)
        ids = party.train_ids()
        data = LocalData(party.prop.rows(ids), signed_labels(party.y[ids], server.C))
        exact_at_anchor = data.hvp(fh.w0, v) + server.lam * server.num_train() * v
        assert np.allclose(fh.operator(v), exact_at_anchor, rtol=1e-10, atol=1e-12)
        # the step actually taken: its true Hessian error at the W it was taken from is within the drift term
        step = proc.last_v
        w_before = server.W - step
        gap = np.linalg.norm(server.hvp(w_before, step, server.num_train()) - fh.operator(step), axis=0)
        assert np.all(gap <= proc.last["anchor_drift"] * (1 + 1e-9) + 1e-15)
        drifts.append(row["anchor_drift"])
        _, grad = server.objective(server.W, server.num_train())
        assert np.all(np.linalg.norm(grad, axis=0) <= proc.beta + 1e-12)
    assert max(drifts) > 0 and server.factored.builds < 6     # corrections, not a rebuild per request


def test_factored_matches_cg_steps():
    a = build_server([generated_party(n=800, f=8, seed=9)], r_max=1e-9)
    b = build_server([generated_party(n=800, f=8, seed=9)], r_max=1e-9)
    pa, pb = processor(a, budget=1.0), processor(b, budget=1.0, solver="factored")
    for j in range(5):
        e = a.parties[0].prop.sample_edges(1, np.random.default_rng(j))
        ra, rb = pa.process({0: e}), pb.process({0: e.copy()})
        assert ra["action"] == rb["action"] == "newton"
    assert np.allclose(a.W, b.W, rtol=1e-6, atol=1e-9) and rb["cg_iterations"] <= 5


def test_factored_rebuilds_its_anchor_before_giving_up_a_step():
    """solver=factored with the certificate enforced: when a step's bound exceeds the budget and the
    anchor's curvature drift is part of it, the anchor is rebuilt at the current W and the step solved
    again, before any retraining."""
    server = build_server([generated_party(n=1500, f=8, seed=7)], noise_std=0.0, r_max=1e-9, lam=1e-3)
    # the first request's bound (no drift yet) is ~3.0e-4, the second's ~8.1e-4 with drift ~2.2e-4
    proc = processor(server, budget=7e-4, **{"certificate.include_train_residual": False, "solver": "factored"})
    party, rng = server.parties[0], np.random.default_rng(0)
    first = proc.process({0: party.prop.sample_edges(1, rng)})
    assert first["anchor_builds"] == 1 and first["bound"] <= 7e-4
    second = proc.process({0: party.prop.sample_edges(1, rng)})
    assert second["anchor_builds"] == 2 and second["anchor_build_s"] > 0 and second["anchor_drift"] == 0.0
    # over the budget without any drift (the first request, budget 2.5e-4): a rebuild could not help, none is made
    server = build_server([generated_party(n=1500, f=8, seed=7)], noise_std=0.0, r_max=1e-9, lam=1e-3)
    proc = processor(server, budget=2.5e-4, **{"certificate.include_train_residual": False, "solver": "factored"})
    first = proc.process({0: server.parties[0].prop.sample_edges(1, np.random.default_rng(0))})
    assert first["anchor_builds"] == 1 and first["action"] != "newton"


def test_factored_row_norm_bound_is_the_largest_row_not_the_changed_block():
    """solver=factored: the drift term's bound on the training rows' norms is the largest single row any
    request wrote (still a bound on every current row), not the norm of all changed rows together,
    which would inflate the drift term and retrain for nothing."""
    server = build_server([generated_party(n=1500, f=8, seed=7)], noise_std=0.0, r_max=1e-9, lam=1e-3)
    proc = processor(server, **{"certificate.include_train_residual": False, "solver": "factored",
                                "certificate.enforce": False})
    party, rng = server.parties[0], np.random.default_rng(0)
    seen = float(np.linalg.norm(party.local_data(server.C).z, axis=1).max())
    multi_row = 0
    for _ in range(4):
        proc.process({0: party.prop.sample_edges(2, rng)})
        new = party.change.new
        if new.shape[0]:
            seen = max(seen, float(np.linalg.norm(new, axis=1).max()))
        multi_row += new.shape[0] > 1
        current = float(np.linalg.norm(party.local_data(server.C).z, axis=1).max())
        assert current <= party.row_norm_max * (1 + 1e-12)           # a bound on every row
        assert party.row_norm_max <= seen * (1 + 1e-12)              # and no looser than the rows written
    assert multi_row                                                  # requests that changed several rows


def test_server_sums_clients_messages_in_float64_whatever_they_computed_in():
    """Every certificate message is sent and summed in float64: a client computing in float32 (a float32
    propagation state) cannot make the server's sum lose what float32 cannot hold (2^24 + 1)."""
    from fgx.federation.channel import Channel
    from fgx.unlearning.certified import MESSAGES, CertifiedServer
    parties = [generated_party(n=40, seed=s) for s in (1, 2)]
    for cid, p in enumerate(parties):
        p.cid = cid
    heard = []
    server = CertifiedServer(parties, 3, 1e-2, 0.0, Channel(MESSAGES, auditor=lambda *a: heard.append(a)), seed=0)
    parts = {0: np.array([2.0 ** 24], dtype=np.float32), 1: np.array([1.0], dtype=np.float32)}
    got = server.gather("residue_sums", lambda p: {"sum": parts[p.cid]})
    assert got["sum"].dtype == np.float64 and got["sum"][0] == 2.0 ** 24 + 1
    assert all(payload["sum"].dtype == torch.float64 for _, payload, *_ in heard)


def test_certificate_messages_go_between_the_clients_and_the_party_named_server():
    """The channel's record names one server: what clients send is addressed to "server", the same
    name that sends the broadcasts, so an audit of the conversation sees two sides, not three."""
    from fgx.federation.channel import Channel
    from fgx.unlearning.certified import MESSAGES, CertifiedServer
    parties = [generated_party(n=40, seed=s) for s in (1, 2)]
    for cid, p in enumerate(parties):
        p.cid = cid
    heard = []
    server = CertifiedServer(parties, 3, 1e-2, 0.0, Channel(MESSAGES, auditor=lambda *a: heard.append(a)), seed=0)
    server.preprocess("row_max")
    server.broadcast("weights", np.zeros((8, 3)))
    ends = {(src, dst) for _, _, src, dst, _ in heard}
    assert ends == {(0, "server"), (1, "server"), ("server", 0), ("server", 1)}
