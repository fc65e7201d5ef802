"""Metric-DP accounting for released embeddings (CE-FedGNN, Theorem 3.6).

Gaussian noise σ0 on L2-normalised embeddings, released R' times, is (ε(ρ), δ)-metric-DP at
distance ρ with ε(ρ) = RDP of the Gaussian mechanism with noise multiplier z = σ0/ρ at sample
rate 1, composed over R' steps and converted to (ε, δ). The accountant is dp-accounting's
RdpAccountant; the only part that is ours is reading its ε as a guarantee at distance ρ, and
choosing ρ from k-nearest-neighbour distances between released embeddings."""
from __future__ import annotations

import math

import numpy as np

PERCENTILES = (50, 90, 95, 99, 100)
SIGMAS = (0.3, 0.5, 0.7, 1.0, 2.0, 3.0, 5.0)

# Opacus' RDPAccountant.DEFAULT_ALPHAS. The paper used Opacus; its discrete grid (not a continuous
# minimisation) is what reproduces Table 6, so it is passed to the accountant explicitly.
OPACUS_ORDERS = tuple([1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)))


def orders_for(name: str | list) -> tuple:
    if isinstance(name, (list, tuple)):
        return tuple(float(a) for a in name)
    if name == "opacus_default":
        return OPACUS_ORDERS
    if name == "dp_accounting_default":
        from dp_accounting.rdp.rdp_privacy_accountant import DEFAULT_RDP_ORDERS   # RdpAccountant()'s grid
        return tuple(DEFAULT_RDP_ORDERS)
    raise ValueError(f"unknown RDP order grid {name!r}; use opacus_default, dp_accounting_default or a list")


def metric_dp_epsilon(rho: float, sigma0: float, releases: int, delta: float,
                      orders: tuple = OPACUS_ORDERS) -> float:
    """ε at distance ``rho`` for ``releases`` Gaussian releases with std ``sigma0`` (dp-accounting RDP)."""
    import dp_accounting
    from dp_accounting import rdp

    if rho <= 0 or sigma0 <= 0 or releases < 0 or not 0 < delta < 1:
        raise ValueError(f"need rho > 0, sigma > 0, releases >= 0, 0 < delta < 1 "
                         f"(got rho={rho}, sigma={sigma0}, releases={releases}, delta={delta})")
    if releases == 0:
        return 0.0
    acc = rdp.RdpAccountant(orders=list(orders))
    acc.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(sigma0 / rho), int(releases)))
    return float(acc.get_epsilon(delta))


def exact_gaussian_epsilon(rho: float, sigma0: float, releases: int, delta: float) -> float:
    """Tight ε: R' releases at sample rate 1 compose to one Gaussian with multiplier z/√R'."""
    from dp_accounting import pld

    if releases == 0:
        return 0.0
    z = sigma0 / rho / math.sqrt(releases)
    acc = pld.PLDAccountant()
    import dp_accounting
    acc.compose(dp_accounting.GaussianDpEvent(z))
    return float(acc.get_epsilon(delta))


def epsilon_table(rhos: dict | list, sigmas, releases: int, delta: float,
                  orders: tuple = OPACUS_ORDERS, exact: bool = False) -> list[dict]:
    """Rows in the layout of CE-FedGNN Tables 6/7: one row per ρ (keyed by percentile when ``rhos``
    is a dict {q: ρ_q}), one ε column per σ0."""
    items = rhos.items() if isinstance(rhos, dict) else [(None, r) for r in rhos]
    rows = []
    for q, rho in items:
        row = {"percentile": q, "rho": float(rho),
               "eps": {float(s): metric_dp_epsilon(rho, s, releases, delta, orders) for s in sigmas}}
        if exact:
            row["eps_exact"] = {float(s): exact_gaussian_epsilon(rho, s, releases, delta) for s in sigmas}
        rows.append(row)
    return rows


def knn_distance_percentiles(embeddings: np.ndarray, k: int = 50, percentiles=PERCENTILES,
                             queries: int | None = None, seed: int = 0) -> dict:
    """ρ_q: the q-th percentile over nodes of the L2 distance from a node's L2-normalised embedding
    to its k-th nearest other node (the node itself excluded). ``queries``: measure the distance for
    that many nodes drawn at random (to all nodes; an unbiased sample of the percentiles), not for
    every node."""
    from sklearn.neighbors import NearestNeighbors

    x = np.asarray(embeddings, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 2:
        raise ValueError(f"need at least 2 embeddings to measure k-NN distances, got shape {x.shape}")
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    k_eff = min(k, x.shape[0] - 1)
    q = x
    if queries is not None and queries < x.shape[0]:
        q = x[np.random.default_rng(seed).choice(x.shape[0], size=queries, replace=False)]
    nn = NearestNeighbors(n_neighbors=k_eff + 1).fit(x)
    dist, _ = nn.kneighbors(q)
    d_k = dist[:, k_eff]          # column 0 is the node itself
    return {"k": k_eff, "queries": int(q.shape[0]), "nodes": int(x.shape[0]),
            "rho": {int(qq): float(np.percentile(d_k, qq)) for qq in percentiles}}
