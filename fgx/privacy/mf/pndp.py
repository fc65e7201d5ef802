"""Pairwise privacy loss of decentralised SGD under a trust model (PNDP: Cyffers et al. 2022; SecLDP:
Allouah et al. 2024) through fgx's matrix-factorisation accounting (Bellet et al. 2025, §7.1,
Eq. 12), for any local correlation and participation, grouped by graph distance from the attacker;
for DP-D-SGD at user level also the Cyffers et al. (2022) bound (Theorem 11 of arXiv 2206.05091,
corrected form, capped at the LDP level).

One table serves both ``fgx privacy pndp`` and a run's privacy.json (``privacy=mf_gdp``), so the
two agree by construction for the same graph, T, correlation and participation."""
from __future__ import annotations

import networkx as nx
import numpy as np

from fgx.privacy.mf.gdp import eps_from_mu_many
from fgx.privacy.mf.participation import local_patterns
from fgx.privacy.mf.sensitivity import pattern_values
from fgx.privacy.mf.trust import oriented_incidence, victim_grams
from fgx.privacy.mf.workloads import matrix_powers


def cyffers_rdp(w: np.ndarray, g: nx.Graph, victim: int, attacker: int, steps: int,
                alpha: float = 2.0, sigma: float = 1.0, clip: float = 1.0) -> float:
    """ε_{u→v}(α) = αΔ²/(2σ²) · min(T, Σ_s (T-s) Σ_{w∈N[v]} (W^s)_{u,w} / ‖(W^s)_{:,w}‖²)."""
    pw = matrix_powers(w, steps)
    closed = list(g.neighbors(attacker)) + [attacker]
    total = 0.0
    for s in range(steps):
        norms = (pw[s] ** 2).sum(0)
        total += (steps - s) * sum(pw[s][victim, j] / norms[j] for j in closed)
    return alpha * clip ** 2 / (2 * sigma ** 2) * min(float(steps), total)


def ldp_sens2(c_local: np.ndarray | None, steps: int, b: int, bound: str = "abs_sum_capped") -> np.ndarray:
    """LDP sens² of every participation pattern (the same for every node: C = C_local ⊗ I_n)."""
    c = np.eye(steps) if c_local is None else c_local
    return pattern_values(c.T @ c, local_patterns(steps, b), bound)


def _stats(v) -> dict:
    v = np.asarray(v, dtype=float)
    return {"min": float(v.min()), "mean": float(v.mean()), "max": float(v.max())}


def pairwise_table(w: np.ndarray, g: nx.Graph, steps: int, b: int = 1, c_local: np.ndarray | None = None,
                   attackers=None, trust: str = "pndp", sigma: float = 1.0, alpha: float = 2.0,
                   delta: float = 1e-6, bound: str = "abs_sum_capped", secret_scale: float = 0.0,
                   gossip_steps: int = 1, progress=None) -> dict:
    """Per (victim, attacker) pair: graph distance, sens², and for noise multiplier σ (noise std per
    unit of sensitivity) μ = sens/σ, RDP(α) = α sens²/(2σ²) and ε at δ; then min/mean/max by
    distance, the worst pair, and the LDP level. Each attacker acts alone (``attackers``: node
    ids; None = every node). (k, b) participation: patterns j, j+b, ... (b = 1: user level).
    ``abs_sum_capped`` caps each pattern at |π|·λ_max and at its LDP sens² (module
    fgx.privacy.mf.sensitivity)."""
    n = w.shape[0]
    if steps % b:
        raise ValueError(f"T={steps} must be a multiple of b={b}")
    attackers = list(range(n)) if attackers is None else [int(a) for a in attackers]
    if trust == "secldp" and secret_scale <= 0:
        raise ValueError("secldp needs secrets (secret_scale > 0); without them it is pndp")
    secrets = oriented_incidence(w) if trust == "secldp" else None
    ldp_p = ldp_sens2(c_local, steps, b, bound)
    ldp = float(ldp_p.max())
    patterns = local_patterns(steps, b)
    identity = c_local is None or np.allclose(c_local, np.eye(steps))
    cyffers = trust == "pndp" and identity and b == 1 and gossip_steps == 1     # the bound's setting
    pairs = []
    for i, a in enumerate(attackers):
        dist = dict(nx.single_source_shortest_path_length(g, a))
        grams = victim_grams(w, steps, c_local, [a], trust, secrets, secret_scale, gossip_steps)
        for u, x in grams.items():
            vals = pattern_values(x, patterns, bound)
            if bound == "abs_sum_capped":
                vals = np.minimum(vals, ldp_p)
            row = {"victim": u, "attacker": a, "distance": dist.get(u), "sens2": float(vals.max())}
            if cyffers:
                row["cyffers_rdp"] = cyffers_rdp(w, g, u, a, steps, alpha, sigma)
            pairs.append(row)
        if progress is not None:
            progress(i + 1, len(attackers))
    s2 = np.array([p["sens2"] for p in pairs])
    mus = np.sqrt(s2) / sigma
    eps = eps_from_mu_many(mus, delta)
    for p, m, e in zip(pairs, mus, eps):
        p.update(mu=float(m), rdp=float(alpha * m * m / 2), epsilon=float(e))
    by_distance = []
    for d in sorted({p["distance"] for p in pairs if p["distance"] is not None}):
        rows = [p for p in pairs if p["distance"] == d]
        row = {"distance": d, "count": len(rows)}
        for key in ("rdp", "epsilon") + (("cyffers_rdp",) if cyffers else ()):
            row[key] = _stats([p[key] for p in rows])
        by_distance.append(row)
    worst = max(pairs, key=lambda p: p["sens2"]) if pairs else None
    mu_ldp = float(np.sqrt(ldp) / sigma)
    return {"trust_model": trust, "steps": steps, "b": b, "alpha": alpha, "sigma": sigma, "delta": delta,
            "sens_bound": bound, "gossip_steps": gossip_steps, "secret_scale": secret_scale if secrets is not None else None,
            "attackers": attackers, "ldp": {"sens2": ldp, "mu": mu_ldp, "rdp": alpha * mu_ldp ** 2 / 2,
                                            "epsilon": float(eps_from_mu_many([mu_ldp], delta)[0])},
            "worst_pair": worst, "pairs": pairs, "by_distance": by_distance}


def pndp_table(w: np.ndarray, g: nx.Graph, steps: int, attacker: int = 0, b: int = 1, alpha: float = 2.0,
               sigma: float = 1.0, c_local: np.ndarray | None = None, bound: str = "abs_sum_capped") -> dict:
    """Fig. 2 of Bellet et al.: PNDP of one attacker (default node 0), user level by default.
    ``ldp_rdp`` is the LDP level α·sens²_LDP/(2σ²)."""
    t = pairwise_table(w, g, steps, b, c_local, [attacker], "pndp", sigma, alpha, bound=bound)
    t["attacker"] = attacker
    t["ldp_rdp"] = t["ldp"]["rdp"]
    return t
