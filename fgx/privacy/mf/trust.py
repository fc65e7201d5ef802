"""Attacker knowledge 𝒪 = AG + BZ for a trust model (Theorem 5), and the sensitivity of each
victim through the attacker's projector B^†B (Theorem 7 with the Lemma-11 reduction).

Everything is for local correlations C = C_local ⊗ I_n (C_local = I: DP-D-SGD) in time-major order,
with 𝐖_T the message workload. Dense: n·T up to a few thousand (Fig. 2 uses T = 10)."""
from __future__ import annotations

import numpy as np

from fgx.privacy.mf.sensitivity import projector, sens2_from_gram
from fgx.privacy.mf.workloads import dl_workload


def received_rows(w: np.ndarray, steps: int, attackers) -> np.ndarray:
    """Rows of 𝐖_T the attacker set receives: messages n*t + j from every neighbour j ∉ 𝒜 (𝐏_𝒜)."""
    n = w.shape[0]
    att = set(int(a) for a in attackers)
    senders = sorted({j for a in att for j in np.nonzero(w[a])[0] if j not in att})
    return np.array([t * n + j for t in range(steps) for j in senders], dtype=int)


def _own_rows(n: int, steps: int, nodes) -> np.ndarray:
    """Identity rows e_{n t + a} (noise of the given nodes, known to the attacker)."""
    cols = np.array([t * n + a for t in range(steps) for a in nodes], dtype=int)
    e = np.zeros((len(cols), n * steps))
    e[np.arange(len(cols)), cols] = 1.0
    return e


def knowledge_gram(w: np.ndarray, steps: int, c_local: np.ndarray | None = None,
                   trust: str = "pndp", attackers=(0,), secrets: np.ndarray | None = None) -> np.ndarray:
    """X = C'ᵀ(B^†B)C' over the nT gradient coordinates, with B the attacker's noise matrix and
    C' = C with the attackers' own gradient columns zeroed (Lemma 11: the attacker knows them).

    ldp: B = 𝐖_T C^{-1} (all messages). pndp: B = [𝐏_𝒜𝐖_T C^{-1}; own-noise rows]. secldp (DECOR,
    Allouah et al. 2024): each message also carries Σ_e ±s_e over the node's incident edges; Z
    stacks the nT local noises and the |E|·T secrets; the attacker knows its own local noise and
    the secrets on its edges (``secrets`` = oriented n × |E| incidence matrix)."""
    n = w.shape[0]
    nt = n * steps
    cinv = np.eye(steps) if c_local is None else np.linalg.inv(c_local)
    mix = np.kron(cinv, np.eye(n))
    wt = dl_workload(w, steps, 0)
    att = [int(a) for a in attackers]
    if trust == "ldp":
        b = wt @ mix
        x_noise = projector(b)
        c = np.kron(np.linalg.inv(cinv), np.eye(n))
        return c.T @ x_noise @ c
    rows = received_rows(w, steps, att)
    if trust == "pndp":
        b = np.vstack([wt[rows] @ mix, _own_rows(n, steps, att)])
        zdim = nt
    elif trust == "secldp":
        if secrets is None:
            raise ValueError("secldp needs the oriented incidence matrix of the secrets")
        m = secrets.shape[1]
        sec = np.kron(np.eye(steps), secrets)                     # (nT, mT): secrets entering each node's noise
        full = np.hstack([mix, sec])
        known_edges = [e for e in range(m) if any(secrets[a, e] != 0 for a in att)]
        known = np.zeros((len(known_edges) * steps, nt + m * steps))
        for i, (t, e) in enumerate((t, e) for t in range(steps) for e in known_edges):
            known[i, nt + t * m + e] = 1.0
        own = np.hstack([_own_rows(n, steps, att), np.zeros((len(att) * steps, m * steps))])
        b = np.vstack([wt[rows] @ full, own, known])
        zdim = nt + m * steps
    else:
        raise ValueError(f"trust model must be ldp, pndp or secldp, got {trust!r}")
    x_noise = projector(b)
    # A = B C' with C' mapping gradients into noise space: local part C, secrets part 0
    c = np.zeros((zdim, nt))
    c[:nt] = np.kron(np.linalg.inv(cinv), np.eye(n))
    for a in att:
        c[:, a::n] = 0.0
    return c.T @ x_noise @ c


def oriented_incidence(w: np.ndarray) -> np.ndarray:
    """n × |E| incidence (+1 at the lower id, -1 at the higher) of the gossip graph's edges."""
    n = w.shape[0]
    edges = [(i, j) for i in range(n) for j in range(i + 1, n) if w[i, j] > 0 or w[j, i] > 0]
    m = np.zeros((n, len(edges)))
    for e, (i, j) in enumerate(edges):
        m[i, e], m[j, e] = 1.0, -1.0
    return m


def victim_sens2(x: np.ndarray, n: int, steps: int, b: int, victim: int) -> float:
    from fgx.privacy.mf.participation import node_patterns
    return sens2_from_gram(x, node_patterns(n, steps, b, victim))
