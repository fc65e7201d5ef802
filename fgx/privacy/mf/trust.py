"""Attacker knowledge 𝒪 = AG + BZ for a trust model (Theorem 5), and the sensitivity of each
victim through the attacker's projector B^†B (Theorem 7 with the Lemma-11 reduction).

Everything is for local correlations C = C_local ⊗ I_n (C_local = I: DP-D-SGD) in time-major order,
with 𝐖_T the message workload.

Two implementations of the same quantity, the victim's Gram X_u = C_uᵀ B^†B C_u:
:func:`knowledge_gram` builds B densely and projects with an SVD (the paper's construction; n·T up
to a few thousand — the test oracle), and :func:`victim_grams`, used by runs and ``fgx privacy
pndp``, which never forms the nT × nT workload. Derivation of the latter: the attacker's messages
are O = Σ_v Y_v x_v with Y_v the (received rows × T) block of node v's inputs x_v = g_v + n_v. It
knows its own inputs and noise, and (SecLDP) the secrets on its edges, and subtracts them; what is
left is Gaussian with covariance S = Σ_{v∉𝒜} Y_v (C^{-1}C^{-ᵀ}) Y_vᵀ + ξ² Σ_{unknown e} D_e D_eᵀ
(D_e = Y_i - Y_j for edge e = (i, j)). B has full row rank for these trust models, so
B^†B = Bᵀ(BBᵀ)^{-1}B, and the Schur complement of the known-noise rows gives X_u = Y_uᵀ S^{-1} Y_u.
Cost O(R²·n·T) with R = T·K·(attacker's in-neighbours), memory O(R·n·T)."""
from __future__ import annotations

import numpy as np
from scipy.linalg import LinAlgError, cholesky, eigh, solve_triangular

from fgx.privacy.mf.sensitivity import projector, sens2_from_gram
from fgx.privacy.mf.workloads import dl_workload, matrix_powers

TRUST_MODELS = ("ldp", "pndp", "secldp")


def senders(w: np.ndarray, attackers) -> list[int]:
    """Nodes j ∉ 𝒜 whose messages an attacker in 𝒜 receives (W[a, j] > 0)."""
    att = {int(a) for a in attackers}
    return sorted({int(j) for a in att for j in np.nonzero(w[a])[0] if j not in att})


def received_rows(w: np.ndarray, steps: int, attackers, gossip_steps: int = 1) -> np.ndarray:
    """Rows of the (K-step) message workload the attacker set receives (𝐏_𝒜)."""
    n = w.shape[0]
    return np.array([(t * gossip_steps + m) * n + j for t in range(steps) for m in range(gossip_steps)
                     for j in senders(w, attackers)], dtype=int)


def _own_rows(n: int, steps: int, nodes) -> np.ndarray:
    """Identity rows e_{n t + a} (noise of the given nodes, known to the attacker)."""
    cols = np.array([t * n + a for t in range(steps) for a in nodes], dtype=int)
    e = np.zeros((len(cols), n * steps))
    e[np.arange(len(cols)), cols] = 1.0
    return e


def knowledge_gram(w: np.ndarray, steps: int, c_local: np.ndarray | None = None,
                   trust: str = "pndp", attackers=(0,), secrets: np.ndarray | None = None,
                   gossip_steps: int = 1, secret_scale: float = 1.0) -> np.ndarray:
    """X = C'ᵀ(B^†B)C' over the nT gradient coordinates, with B the attacker's noise matrix and
    C' = C with the attackers' own gradient columns zeroed (Lemma 11: the attacker knows them).
    Dense (the paper's construction): the test oracle of :func:`victim_grams`.

    ldp: B = 𝐖_T C^{-1} (all messages). pndp: B = [𝐏_𝒜𝐖_T C^{-1}; own-noise rows]. secldp (DECOR,
    Allouah et al. 2024): each message also carries Σ_e ±ξ s_e over the node's incident edges; Z
    stacks the nT local noises and the |E|·T secrets; the attacker knows its own local noise and
    the secrets on its edges (``secrets`` = oriented n × |E| incidence matrix, ξ = secret_scale)."""
    n = w.shape[0]
    nt = n * steps
    cinv = np.eye(steps) if c_local is None else np.linalg.inv(c_local)
    mix = np.kron(cinv, np.eye(n))
    wt = dl_workload(w, steps, 0, gossip_steps)
    att = [int(a) for a in attackers]
    if trust == "ldp":
        b = wt @ mix
        x_noise = projector(b)
        c = np.kron(np.linalg.inv(cinv), np.eye(n))
        return c.T @ x_noise @ c
    rows = received_rows(w, steps, att, gossip_steps)
    if trust == "pndp":
        b = np.vstack([wt[rows] @ mix, _own_rows(n, steps, att)])
        zdim = nt
    elif trust == "secldp":
        if secrets is None:
            raise ValueError("secldp needs the oriented incidence matrix of the secrets")
        m = secrets.shape[1]
        sec = np.kron(np.eye(steps), secret_scale * secrets)     # (nT, mT): secrets entering each node's noise
        full = np.hstack([mix, sec])
        known_edges = [e for e in range(m) if any(secrets[a, e] != 0 for a in att)]
        known = np.zeros((len(known_edges) * steps, nt + m * steps))
        for i, (t, e) in enumerate((t, e) for t in range(steps) for e in known_edges):
            known[i, nt + t * m + e] = 1.0
        own = np.hstack([_own_rows(n, steps, att), np.zeros((len(att) * steps, m * steps))])
        b = np.vstack([wt[rows] @ full, own, known])
        zdim = nt + m * steps
    else:
        raise ValueError(f"trust model must be one of {list(TRUST_MODELS)}, got {trust!r}")
    x_noise = projector(b)
    # A = B C' with C' mapping gradients into noise space: local part C, secrets part 0
    c = np.zeros((zdim, nt))
    c[:nt] = np.kron(np.linalg.inv(cinv), np.eye(n))
    for a in att:
        c[:, a::n] = 0.0
    return c.T @ x_noise @ c


def received_blocks(w: np.ndarray, steps: int, rows_of: list[int], gossip_steps: int = 1) -> np.ndarray:
    """Y (R, T, n): Y[(t, m, j), s, v] = (W^(K(t-s)+m))_{j,v} for s <= t: how node v's input at
    step s enters the m-th message of sender j at step t (R = T·K·|rows_of|)."""
    n, k = w.shape[0], gossip_steps
    pw = matrix_powers(w, k * steps)[:, rows_of, :]            # (KT, S, n)
    y = np.zeros((steps, k, len(rows_of), steps, n))
    for d in range(steps):
        t = np.arange(d, steps)
        y[t, :, :, t - d, :] = pw[k * d:k * d + k]           # same block for every t at lag d
    return y.reshape(steps * k * len(rows_of), steps, n)


def victim_grams(w: np.ndarray, steps: int, c_local: np.ndarray | None = None, attackers=(0,),
                 trust: str = "pndp", secrets: np.ndarray | None = None, secret_scale: float = 1.0,
                 gossip_steps: int = 1, victims=None) -> dict[int, np.ndarray]:
    """{victim u: X_u (T × T)} for every u ∉ 𝒜 (or ``victims``), X_u = C_uᵀ B^†B C_u for the
    attacker set 𝒜 under ``trust`` (pndp or secldp; see the module docstring). Equals the blocks
    of :func:`knowledge_gram` without its (nT)² memory."""
    n = w.shape[0]
    att = sorted({int(a) for a in attackers})
    victims = [u for u in range(n) if u not in att] if victims is None else [int(u) for u in victims]
    if trust == "ldp":
        c = np.eye(steps) if c_local is None else c_local
        x = c.T @ c
        return {u: x for u in victims}
    if trust not in ("pndp", "secldp"):
        raise ValueError(f"trust model must be one of {list(TRUST_MODELS)}, got {trust!r}")
    if trust == "secldp" and secrets is None:
        raise ValueError("secldp needs the oriented incidence matrix of the secrets")
    src = senders(w, att)
    if not src:
        return {u: np.zeros((steps, steps)) for u in victims}
    y = received_blocks(w, steps, src, gossip_steps)            # (R, T, n)
    r = y.shape[0]
    cinv = np.eye(steps) if c_local is None else np.linalg.inv(c_local)
    # noise of node v enters as Y_v C^{-1} z_v: covariance Σ_{v∉𝒜} (Y_v C^{-1})(Y_v C^{-1})ᵀ
    mixed = np.einsum("rsv,sq->rvq", y, cinv)
    mixed[:, att, :] = 0.0
    flat = mixed.reshape(r, -1)
    cov = flat @ flat.T
    del mixed, flat
    if trust == "secldp" and secret_scale > 0:
        unknown = [e for e in range(secrets.shape[1]) if not any(secrets[a, e] != 0 for a in att)]
        if unknown:
            d = np.einsum("rsv,ve->res", y, secrets[:, unknown]).reshape(r, -1)
            cov += (secret_scale ** 2) * (d @ d.T)
    yv = np.stack([y[:, :, u] for u in victims], axis=1).reshape(r, -1)     # (R, |victims|·T)
    try:
        lower = cholesky(cov, lower=True, check_finite=False)
        half = solve_triangular(lower, yv, lower=True, check_finite=False)
    except LinAlgError:
        # rank-deficient observations (e.g. K > 1 on a graph where two received averages coincide):
        # the pseudo-inverse on cov's range, which contains every victim's columns
        vals, vecs = eigh(cov, check_finite=False)
        keep = vals > vals[-1] * 1e-12
        half = (vecs[:, keep] / np.sqrt(vals[keep])).T @ yv
    half = half.reshape(half.shape[0], len(victims), steps)
    return {u: half[:, i, :].T @ half[:, i, :] for i, u in enumerate(victims)}


def oriented_incidence(w: np.ndarray) -> np.ndarray:
    """n × |E| incidence (+1 at the lower id, -1 at the higher) of the gossip graph's edges."""
    n = w.shape[0]
    edges = [(i, j) for i in range(n) for j in range(i + 1, n) if w[i, j] > 0 or w[j, i] > 0]
    m = np.zeros((n, len(edges)))
    for e, (i, j) in enumerate(edges):
        m[i, e], m[j, e] = 1.0, -1.0
    return m


def victim_sens2(x: np.ndarray, n: int, steps: int, b: int, victim: int, bound: str = "abs_sum_capped") -> float:
    from fgx.privacy.mf.participation import node_patterns
    return sens2_from_gram(x, node_patterns(n, steps, b, victim), bound)


def accounting_cost(w: np.ndarray, steps: int, attackers, gossip_steps: int = 1, edges: int = 0) -> dict:
    """Memory (bytes) of :func:`victim_grams` for one attacker set: the R × n·T mixed blocks, the
    R × |E|·T secret blocks and the R × R covariance."""
    n = w.shape[0]
    r = steps * gossip_steps * len(senders(w, attackers))
    return {"rows": r, "bytes": 8 * (2 * r * n * steps + r * edges * steps + 2 * r * r)}
