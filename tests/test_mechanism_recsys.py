"""Recommendation methods' defining updates, checked from what tiny runs sent (FedMF's server mean,
LPSFed's Eq. 12/14), and LPSFed's spectral pieces on hand-computed inputs (lowest eigenpairs, Eq. 16)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from mechanisms import by_round, flat

RANK = ["dataset=synthetic_bipartite", "dataset.num_users=90", "dataset.num_items=120", "dataset.mean_degree=12",
        "partitioner=random_users", "partitioner.num_clients=3", "eval_every=10", "output.checkpoint=false"]


def test_fedmf_server_adds_the_mean_update_of_the_clients_holding_each_item(recorded, run_fgx):
    s_lr = 0.7
    run_fgx(*RANK, "rounds=2", "model=mf", "model.dim=8", "algorithm=fedmf", "algorithm.local_epochs=1",
            f"algorithm.server_lr={s_lr}")
    down, up = by_round(recorded, "item_embeddings"), by_round(recorded, "item_updates")
    items = {src: p["items"] for src, _, p in up[1]}
    # the global table as each client received it: every item sits on some client
    def table(r):
        t = {}
        for _, dst, rows in down[r]:
            for i, row in zip(items[dst].tolist(), rows.double()):
                if i in t:
                    assert torch.equal(t[i], row)          # every holder gets the same global row
                t[i] = row
        return t
    shared = sum(torch.bincount(torch.cat(list(items.values()))) > 1)
    assert shared > 10                                      # items held by several clients: mean != sum
    for r in (1, 2):
        before, after = table(r - 1), table(r)
        deltas: dict[int, list] = {}
        for _, _, p in up[r]:
            for i, d in zip(p["items"].tolist(), p["delta"].double()):
                deltas.setdefault(i, []).append(d)
        assert max(max(d.abs().max().item() for d in ds) for ds in deltas.values()) > 1e-3
        for i, ds in deltas.items():
            want = before[i] + s_lr * torch.stack(ds).mean(0)
            assert torch.allclose(after[i], want, atol=1e-6), f"round {r}, item {i}"


def test_lpsfed_sends_eq14_mix_with_eq12_rho_bar(recorded, run_fgx, tmp_path, monkeypatch):
    """Client c receives ρ̄_c·mean + (1-ρ̄_c)·own (Eq. 13/14) of the networks the clients sent, with
    ρ̄_c = 1 - (ρ_c - min ρ)/(max ρ - min ρ) of the similarities they sent (Eq. 12), and the margin
    ρ̄_c·mean M + (1-ρ̄_c)·M_c (Eq. 15's server part)."""
    monkeypatch.setenv("FGX_DATA_DIR", str(tmp_path / "cache"))
    run_fgx(*RANK, "rounds=2", "model=lgcn", "model.dim=8", "model.bias_dim=4", "model.frequency=8",
            "algorithm=lpsfed", "algorithm.local_epochs=1", "algorithm.warmup_rounds=1")
    r = 2
    rho = {src: float(p) for src, _, p in by_round(recorded, "scalar_similarity")[r]}
    own = {src: p for src, _, p in by_round(recorded, "mlp_params")[r]}
    margin = {src: float(p) for src, _, p in by_round(recorded, "scalar_margin")[r]}
    lo, hi = min(rho.values()), max(rho.values())
    assert hi - lo > 1e-6, rho                               # clients differ: ρ̄ is not constant
    mean = {k: torch.stack([o[k].double() for o in own.values()]).mean(0) for k in next(iter(own.values()))}
    m_bar = float(np.mean(list(margin.values())))
    sent = by_round(recorded, "personalized_params")[r]
    assert len(sent) == len(rho)
    for _, dst, p in sent:
        rb = 1 - (rho[dst] - lo) / (hi - lo)
        want = {k: rb * mean[k] + (1 - rb) * own[dst][k].double() for k in mean}
        assert (flat(p["params"]) - flat(want)).abs().max() < 1e-5, f"client {dst} (ρ̄ = {rb:.3f})"
        assert float(p["margin"]) == pytest.approx(rb * m_bar + (1 - rb) * margin[dst], abs=1e-6)
    assert 1 not in by_round(recorded, "personalized_params")      # warm-up round: no mixing


def test_lpsfed_clients_train_on_eq15_margin_with_the_one_the_server_sent(recorded, run_fgx, tmp_path, monkeypatch):
    """Eq. 15 inside local training (issue 67 (c)): every margin a client's BC loss uses in round r is
    ω·M_c + (1 - ω)·M_ui, M_c the margin the server sent it after round r - 1 (read from the channel;
    0 before the first mixing) and M_ui the step's Eq. 8 margin."""
    import fgx.algorithms.lpsfed as lpsfed
    from fgx.recsys import losses

    omega = 0.7
    calls, trained = [], {}
    real_train, real_refined = lpsfed.client_train, losses.refined_margin

    def train(state, *a, **k):
        trained[state.cid] = trained.get(state.cid, 0) + 1
        calls.append((state.cid, trained[state.cid], []))
        return real_train(state, *a, **k)

    def refined(m_ui, context, w):
        out = real_refined(m_ui, context, w)
        calls[-1][2].append((m_ui.detach().double(), out.detach().double()))
        return out

    monkeypatch.setattr(lpsfed, "client_train", train)
    monkeypatch.setattr(losses, "refined_margin", refined)
    monkeypatch.setenv("FGX_DATA_DIR", str(tmp_path / "cache"))
    run_fgx(*RANK, "rounds=3", "model=lgcn", "model.dim=8", "model.bias_dim=4", "model.frequency=8",
            "algorithm=lpsfed", "algorithm.local_epochs=1", "algorithm.warmup_rounds=1", f"algorithm.omega={omega}")
    sent = {r: {dst: float(p["margin"]) for _, dst, p in msgs} for r, msgs in by_round(recorded, "personalized_params").items()}
    assert sorted(sent) == [2, 3] and all(abs(m) > 1e-3 for m in sent[2].values())   # no mixing in the warm-up
    checked = 0
    for cid, r, steps in calls:
        context = sent.get(r - 1, {}).get(cid, 0.0)
        assert steps, f"client {cid} round {r}: no BC step"
        for m_ui, out in steps:
            assert torch.allclose(out, omega * context + (1 - omega) * m_ui, atol=1e-6), f"client {cid} round {r}"
        checked += r == 3
    assert checked == 3                                     # every client trained on a received margin


def _path_laplacian(n: int) -> sp.csr_matrix:
    a = sp.diags([np.ones(n - 1), np.ones(n - 1)], [-1, 1]).tocsr()
    d = np.asarray(a.sum(1)).ravel() ** -0.5
    return (sp.eye(n) - sp.diags(d) @ a @ sp.diags(d)).tocsr()


@pytest.mark.parametrize("dense_below", [10_000, 0])
def test_lowest_eigenpairs_are_the_lowest(dense_below):
    """Normalised Laplacian of a path on n nodes: eigenvalues 1 - cos(πj/(n-1)), j = 0..n-1."""
    from fgx.recsys.spectral import lowest_eigenpairs

    n, k = 40, 6
    lap = _path_laplacian(n)
    w, v = lowest_eigenpairs(lap, k, dense_below=dense_below)
    want = 1 - np.cos(np.pi * np.arange(k) / (n - 1))
    assert np.allclose(w, want, atol=1e-6)
    assert np.allclose(lap @ v, v * w, atol=1e-5)            # and they are eigenvectors of those values


def test_lowpass_distribution_is_eigenvalue_share():
    """Eq. 16: K(i) = λ_i / Σ λ (zeros smoothed to eps, then renormalised)."""
    from fgx.recsys.spectral import lowpass_distribution

    assert np.allclose(lowpass_distribution(np.array([1.0, 2.0, 3.0, 4.0])), [0.1, 0.2, 0.3, 0.4])
    k = lowpass_distribution(np.array([0.0, 0.5, 1.5]), eps=1e-6)
    assert np.allclose(k, np.array([1e-6, 0.25, 0.75]) / (1 + 1e-6))
    assert np.allclose(lowpass_distribution(np.zeros(4)), 0.25)
