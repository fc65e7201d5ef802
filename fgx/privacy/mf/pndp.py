"""Pairwise privacy loss (PNDP) of decentralised SGD grouped by graph distance from the attacker:
fgx's matrix-factorisation accounting (Bellet et al. 2025, §7.1, Eq. 12) against the Cyffers et
al. (2022) bound (Theorem 11 of arXiv 2206.05091, corrected form, capped at the LDP level)."""
from __future__ import annotations

import networkx as nx
import numpy as np

from fgx.privacy.mf.trust import knowledge_gram, victim_sens2
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


def pndp_table(w: np.ndarray, g: nx.Graph, steps: int, attacker: int = 0, b: int = 1, alpha: float = 2.0,
               sigma: float = 1.0, c_local: np.ndarray | None = None) -> dict:
    """Per victim: distance, sens², RDP(α) of fgx's accounting (capped at LDP) and of Cyffers et
    al.; then min/mean/max per distance. σ is the noise std per unit of clip (μ = sens/σ)."""
    n = w.shape[0]
    x = knowledge_gram(w, steps, c_local, "pndp", [attacker])
    x_ldp = knowledge_gram(w, steps, c_local, "ldp", [attacker])
    dist = dict(nx.single_source_shortest_path_length(g, attacker))
    pairs = []
    for u in range(n):
        if u == attacker:
            continue
        ldp = victim_sens2(x_ldp, n, steps, b, u)
        s2 = min(victim_sens2(x, n, steps, b, u), ldp)
        pairs.append({"victim": u, "attacker": attacker, "distance": dist[u], "sens2": s2,
                      "rdp": alpha * s2 / (2 * sigma ** 2), "ldp_rdp": alpha * ldp / (2 * sigma ** 2),
                      "cyffers_rdp": cyffers_rdp(w, g, u, attacker, steps, alpha, sigma)})
    by_distance = []
    for d in sorted({p["distance"] for p in pairs}):
        rows = [p for p in pairs if p["distance"] == d]
        row = {"distance": d, "count": len(rows)}
        for key in ("rdp", "cyffers_rdp"):
            v = np.array([p[key] for p in rows])
            row[key] = {"min": float(v.min()), "mean": float(v.mean()), "max": float(v.max())}
        by_distance.append(row)
    return {"steps": steps, "alpha": alpha, "sigma": sigma, "attacker": attacker, "b": b,
            "ldp_rdp": alpha * steps / b / (2 * sigma ** 2) if c_local is None else None,
            "pairs": pairs, "by_distance": by_distance}
