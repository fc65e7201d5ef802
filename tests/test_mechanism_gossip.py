"""Decentralised SGD (fgx/algorithms/gossip.py), checked from the half-step models the nodes sent:
θ_{t+1} = W·θ_{t+½} with the topology's gossip matrix, then θ_{t+1+½} = θ_{t+1} - lr·(ĝ + n_t) with
‖ĝ‖ ≤ clip and the noise n = C_local^{-1} z, z ~ N(0, (clip·√sens²/μ / batch)²) per coordinate, added to the messages by privacy=mf_gdp (which the
private variants bring)."""
from __future__ import annotations

import json

import networkx as nx
import numpy as np
import pytest
import torch

from mechanisms import by_round

K, B, LR, CLIP, MU = 2, 2, 0.1, 1.0, 0.05
GOSSIP = ["dataset=diabetes", "partitioner=topology", "partitioner.graph=florentine", "model=mlp_tabular",
          "model.hidden=8", f"algorithm.k={K}", f"algorithm.b={B}", f"rounds={K * B}", f"eval_every={K * B}",
          f"algorithm.lr={LR}", f"algorithm.clip={CLIP}", f"privacy.mu={MU}", "output.checkpoint=false"]


def _uniform_gossip(n: int) -> np.ndarray:
    """(A + I) row-normalised on the florentine graph as fgx numbers it (networkx order)."""
    g = nx.convert_node_labels_to_integers(nx.florentine_families_graph())
    a = nx.to_numpy_array(g, nodelist=range(n), weight=None) + np.eye(n)
    return a / a.sum(1, keepdims=True)


def _half_steps(seen) -> torch.Tensor:
    """[T, n, d]: θ_{t+½} of every node, read from the messages it sent at step t."""
    rounds = by_round(seen, "model")
    out = []
    for r in sorted(rounds):
        rows = {}
        for src, _, p in rounds[r]:
            if src in rows:
                assert torch.equal(rows[src], p), "a node sent different models to its neighbours"
            rows[src] = p.detach().double()
        out.append(torch.stack([rows[u] for u in sorted(rows)]))
    return torch.stack(out)


def _noise_std(seen) -> float:
    clients = seen["clients"]
    batch = min(int(c.data.train_mask[: c.num_owned].sum()) for c in clients) // B
    return CLIP * np.sqrt(K) / MU / batch           # identity correlation: sens² = k under (k, b)


def test_gossip_step_mixes_the_sent_half_steps_with_w(recorded, run_fgx):
    """dp_dsgd: the residual θ_{t+1+½} - W·θ_{t+½} is only the next noisy gradient step, so its spread
    is lr·σ; without the averaging the residual would also carry (I - W)·θ_{t+½}."""
    run_fgx(*GOSSIP, "algorithm=dp_dsgd")
    half = _half_steps(recorded)
    n = half.size(1)
    w = torch.tensor(_uniform_gossip(n))
    resid = torch.stack([half[t + 1] - w @ half[t] for t in range(half.size(0) - 1)])
    no_mix = torch.stack([half[t + 1] - half[t] for t in range(half.size(0) - 1)])
    want = LR * _noise_std(recorded)
    assert abs(resid.std().item() / want - 1) < 0.05, (resid.std().item(), want)
    assert no_mix.std().item() > 1.2 * want                       # the check can tell mixing apart


def test_dp_dsgd_noise_has_the_std_its_mu_requires(recorded, run_fgx):
    """The first half step is θ_0 - lr·(ĝ + n_0) from a common θ_0: the node-to-node spread is the
    noise's, clip·√k/μ/batch per coordinate (ĝ adds at most clip in norm); ε follows from μ."""
    from fgx.privacy.mf.gdp import eps_from_mu

    d = run_fgx(*GOSSIP, "algorithm=dp_dsgd")
    half = _half_steps(recorded)
    first = half[0] - half[0].mean(0, keepdim=True)
    n, dim = first.shape
    want = LR * _noise_std(recorded) * np.sqrt((n - 1) / n)
    assert n * dim > 1000 and abs(first.std().item() / want - 1) < 0.06, (first.std().item(), want)
    acc = json.loads((d / "privacy.json").read_text())
    assert acc["noise"]["sens2_ldp"] == pytest.approx(K) and acc["epsilon"] == pytest.approx(eps_from_mu(MU, acc["delta"]))


@pytest.mark.parametrize("algo", ["antipgd", "mafalda_sgd"])
def test_correlated_noise_is_c_local_inverse_of_white_noise(recorded, run_fgx, algo):
    """Whitening the steps' residuals with the run's C_local gives i.i.d. noise of std
    clip·√sens²/μ/batch (for AntiPGD, C_local = lower-triangular ones: n_t = z_t - z_{t-1})."""
    from fgx.decentral.topology import TopologyParams, build_graph, gossip_matrix
    from fgx.privacy.mf.correlations import build_correlation

    d = run_fgx(*GOSSIP, f"algorithm={algo}")
    acc = json.loads((d / "privacy.json").read_text())
    half = _half_steps(recorded)
    T, n, _ = half.shape
    w = torch.tensor(_uniform_gossip(n))
    theta0 = half[0].mean(0)                                 # θ_0 is common; its step noise averages out
    steps = [half[0] - theta0] + [half[t + 1] - w @ half[t] for t in range(T - 1)]
    resid = torch.stack(steps) / -LR                         # [T, n, d]: ĝ + n_t
    c_local = build_correlation(algo.replace("_sgd", ""), gossip_matrix(build_graph(TopologyParams(graph="florentine"))),
                                K, B).c_local
    if algo == "antipgd":
        assert np.allclose(c_local, np.tril(np.ones((T, T))))
    z = torch.einsum("ts,s...->t...", torch.tensor(c_local), resid)[1:]   # step 0 lost its mean above
    want = _noise_std(recorded) / np.sqrt(K) * np.sqrt(acc["noise"]["sens2_ldp"])
    assert abs(z.std().item() / want - 1) < 0.08, (z.std().item(), want)
    raw = resid[1:].std().item()
    assert abs(raw / want - 1) > 0.15                        # the residuals themselves are not white
