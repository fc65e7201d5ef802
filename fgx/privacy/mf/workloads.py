"""Workload matrices of decentralised SGD (time-major stacking: row n*t + u is node u at step t).

𝐖_T (nT × nT) is lower block-Toeplitz with block (r, s) = W^(r-s) for r >= s: row n*t + u is the
half-step message θ_{t+½} of node u (Eq. 6). The post-averaging workload (I_T ⊗ W)𝐖_T has blocks
W^(r-s+1). These dense builders are for small graphs and tests only: the MAFALDA objective needs
just the T × T Gram H, computed in closed form by :func:`gossip_gram`."""
from __future__ import annotations

import numpy as np


def matrix_powers(w: np.ndarray, count: int) -> np.ndarray:
    """[W^0, W^1, ..., W^(count-1)] as a (count, n, n) array."""
    n = w.shape[0]
    out = np.empty((count, n, n))
    out[0] = np.eye(n)
    for p in range(1, count):
        out[p] = out[p - 1] @ w
    return out


def dl_workload(w: np.ndarray, steps: int, initial_power: int = 0, gossip_steps: int = 1) -> np.ndarray:
    """Dense block-Toeplitz workload: block (r, s) = W^(r - s + initial_power) for r >= s.
    initial_power 0: 𝐖_T (messages, what an LDP attacker sees); 1: (I_T ⊗ W)𝐖_T (models after
    averaging, the utility workload). Size (nT)²: small graphs only.

    ``gossip_steps`` K > 1 (Muffliato; initial_power 0 only): every step sends K messages, the
    half-step model θ_{t+½} and then W^m θ_{t+½} for m = 1..K-1, and θ_{t+1} = W^K θ_{t+½}; row
    block (t·K + m, s) is W^(K(t-s) + m), i.e. 𝐖_{KT}(I_T ⊗ [I_n; 0]) of the paper (App. A.4)."""
    n = w.shape[0]
    if gossip_steps > 1 and initial_power:
        raise ValueError("gossip_steps > 1 is defined for the message workload (initial_power 0) only")
    k = gossip_steps
    pw = matrix_powers(w, k * steps + initial_power)
    out = np.zeros((n * steps * k, n * steps))
    for r in range(steps):
        for m in range(k):
            row = (r * k + m) * n
            for s in range(r + 1):
                out[row:row + n, s * n:(s + 1) * n] = pw[k * (r - s) + m + initial_power]
    return out


def node_columns(n: int, steps: int, node: int) -> np.ndarray:
    """Time-major columns of one node's gradients/noise: n*t + node for t = 0..T-1."""
    return np.arange(steps) * n + node


def lemma10_gram_explicit(workload: np.ndarray, n: int, steps: int) -> np.ndarray:
    """H = Σ_i A_iᵀ A_i with A_i the columns of node i (the explicit Lemma-10 construction; the
    commutation matrix of the paper is this column selection). Needs the dense workload."""
    h = np.zeros((steps, steps))
    for i in range(n):
        a = workload[:, node_columns(n, steps, i)]
        h += a.T @ a
    return h


def gossip_gram(w: np.ndarray, steps: int, variant: str = "postavg") -> np.ndarray:
    """Closed-form Lemma-10 Gram H (T × T) without building the nT × nT workload.

    Block (r, s) of the workload is W^(r-s+o) (o = 1 post-averaging, 0 messages), so
    H[s, t] = Σ_{r >= max(s,t)} <W^(r-s+o), W^(r-t+o)>_F. With the Frobenius Gram table
    G[p, q] = <W^p, W^q>_F this is a running sum along the diagonals of G.
    Memory O(T n²), time O(T n³ + T² n²)."""
    if variant not in ("postavg", "message"):
        raise ValueError(f"variant must be 'postavg' or 'message', got {variant!r}")
    o = 1 if variant == "postavg" else 0
    n = w.shape[0]
    vecs = np.empty((steps + o, n * n))
    cur = np.eye(n)
    for p in range(steps + o):
        vecs[p] = cur.ravel()
        cur = cur @ w
    gram = vecs @ vecs.T
    h = np.zeros((steps, steps))
    for d in range(steps):
        # pairs (s, t = s - d): terms G[o + j, o + j + d] for j = 0 .. T-1-s
        diag = np.diagonal(gram, offset=d)[o:o + steps - d]
        csum = np.cumsum(diag)
        s = np.arange(d, steps)
        vals = csum[steps - 1 - s]
        h[s, s - d] = vals
        h[s - d, s] = vals
    return h


def prefix_gram(steps: int) -> np.ndarray:
    """H = AᵀA for the centralised prefix-sum workload A = tril(1): H[s, t] = T - max(s, t)."""
    idx = np.arange(steps)
    return (steps - np.maximum.outer(idx, idx)).astype(float)


def frobenius_objective_explicit(w: np.ndarray, steps: int, c_local: np.ndarray) -> float:
    """‖(I_T ⊗ W)𝐖_T (C_local^{-1} ⊗ I_n)‖_F² built densely (test oracle for Lemma 10)."""
    n = w.shape[0]
    big = dl_workload(w, steps, 1) @ np.kron(np.linalg.inv(c_local), np.eye(n))
    return float(np.sum(big ** 2))
