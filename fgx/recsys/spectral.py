"""Spectral pieces of LPSFed: the normalised bipartite Laplacian, its Φ lowest eigenpairs (scipy's
Lanczos ``eigsh``, dense ``eigh`` for small graphs) cached on disk per client, the normalised
low-pass eigenvalue distribution K (Eq. 16), the KL similarity (Eq. 11) and Eq. 12's min-max map,
plus the authors' code's variants of the last three (``code_compat``: single-bin histogram, scalar
KL, ρ/max normalisation) and its anchor sizes."""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import eigsh


def bipartite_laplacian(users: np.ndarray, items: np.ndarray, num_users: int, num_items: int) -> sp.csr_matrix:
    """L = I - D^-1/2 A D^-1/2 with A = [[0, R], [R^T, 0]]; isolated nodes get L_ii = 1."""
    n = num_users + num_items
    r = sp.coo_matrix((np.ones(len(users)), (users, items + num_users)), shape=(n, n))
    a = (r + r.T).tocsr()
    a.data[:] = 1.0   # binary, even if a pair was listed twice
    deg = np.asarray(a.sum(1)).ravel()
    inv = np.zeros_like(deg)
    inv[deg > 0] = deg[deg > 0] ** -0.5
    d = sp.diags(inv)
    return (sp.eye(n) - d @ a @ d).tocsr()


REPEATED = 1e-6      # eigenvalues closer than this are one repeated eigenvalue (canonical_basis)


def canonical_basis(w: np.ndarray, v: np.ndarray, tol: float = REPEATED) -> np.ndarray:
    """``v`` with the basis of each repeated eigenvalue's eigenspace replaced by a canonical one.

    Inside such an eigenspace any orthonormal basis is an eigenbasis, and which one LAPACK or ARPACK
    returns depends on the CPU's kernels (AVX2 and AVX-512 builds of the same OpenBLAS differ). LGCN
    learns one kernel per eigenvector, so that choice changed a run's numbers from one machine to the
    next (small bipartite client graphs repeat eigenvalues many times). The canonical basis depends
    only on the eigenspace: its projector P applied to a fixed Gaussian matrix R, orthonormalised by
    QR (a function of P·R alone). Vectors of simple eigenvalues are left as the solver gave them (their
    sign does not matter: LGCN filters with U·diag(k)·Uᵀ)."""
    v = np.array(v, dtype=np.float64, copy=True)
    bounds = np.flatnonzero(np.diff(w) >= tol) + 1
    runs = [(a, b) for a, b in zip(np.r_[0, bounds], np.r_[bounds, len(w)]) if b - a > 1]
    if not runs:
        return v
    fixed = np.random.default_rng(0).standard_normal((v.shape[0], max(b - a for a, b in runs)))
    for a, b in runs:
        block = v[:, a:b]
        v[:, a:b] = np.linalg.qr(block @ (block.T @ fixed[:, : b - a]))[0]
    return v


def lowest_eigenpairs(lap: sp.csr_matrix, k: int, dense_below: int = 300, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` smallest eigenvalues (ascending) and eigenvectors [n, k] of a symmetric PSD matrix,
    repeated eigenvalues with a machine-independent basis (``canonical_basis``). The dense path sees
    the whole spectrum, so a repeated eigenvalue cut by ``k`` is made canonical before the cut; on the
    Lanczos path (graphs over ``dense_below`` nodes) only the part below the cut is seen."""
    n = lap.shape[0]
    k = min(k, n)
    if n <= dense_below or k >= n - 1:
        w, v = np.linalg.eigh(lap.toarray())
        return np.clip(w[:k], 0.0, 2.0), canonical_basis(w, v)[:, :k]
    # smallest eigenvalues of L are the largest of 2I - L (spectrum in [0, 2]): Lanczos converges
    # much faster on the largest end than with which="SA"
    # tol=0 (machine precision): with tol=1e-6 a MovieLens-100K client's vectors differed by up to 1e-6
    # between OpenBLAS's AVX2 and AVX-512 kernels (1e-12 with tol=0), which survives the float32 cast and
    # moved a 40-round LPSFed run's NDCG@20 by 0.01 from one machine to another; it cost no time there
    rng = np.random.default_rng(seed)
    shifted = (2.0 * sp.eye(n) - lap).tocsr()
    w, v = eigsh(shifted, k=k, which="LA", v0=rng.standard_normal(n), tol=0)
    w = 2.0 - w
    order = np.argsort(w)
    return np.clip(w[order], 0.0, 2.0), canonical_basis(w[order], v[:, order])


def cached_eigenpairs(users: np.ndarray, items: np.ndarray, num_users: int, num_items: int, k: int,
                      cache_dir: Path | None) -> tuple[np.ndarray, np.ndarray]:
    """``lowest_eigenpairs`` of a client's Laplacian, stored in ``cache_dir`` under a hash of the
    graph and k, so repeated runs (seeds, sweeps) skip the decomposition."""
    h = hashlib.sha1()
    h.update(b"canonical-basis")     # pairs cached before canonical_basis are not reused
    for arr in (users.astype(np.int64), items.astype(np.int64), np.array([num_users, num_items, k])):
        h.update(arr.tobytes())
    path = Path(cache_dir) / f"eig_{h.hexdigest()[:20]}.npz" if cache_dir is not None else None
    if path is not None and path.exists():
        try:
            with np.load(path) as z:        # allow_pickle stays False: a cache is data, never code
                w, v = z["w"], z["v"]
            if w.shape == (v.shape[1],) and v.shape[0] == num_users + num_items:
                return w, v
        except Exception:  # noqa: BLE001 - a damaged cache (truncated, foreign file) is recomputed
            pass
    w, v = lowest_eigenpairs(bipartite_laplacian(users, items, num_users, num_items), k)
    if path is not None:
        import os
        import tempfile

        path.parent.mkdir(parents=True, exist_ok=True)
        # a private temporary name: parallel jobs computing the same pairs never share a half-written file
        fd, tmp = tempfile.mkstemp(prefix=path.stem + ".", suffix=".tmp.npz", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, w=w, v=v.astype(np.float32))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return w, v.astype(np.float32)


def lowpass_distribution(eigvals: np.ndarray, eps: float = 1e-10) -> np.ndarray:
    """Eq. 16: K(i) = λ_i / Σ_q λ_q over the first Φ eigenvalues, zeros smoothed to ``eps`` and
    renormalised (Assumption 1) so that KL stays finite. All-zero spectra give the uniform K."""
    lam = np.clip(np.asarray(eigvals, dtype=np.float64), 0.0, None)
    s = lam.sum()
    k = lam / s if s > 0 else np.full(len(lam), 1.0 / len(lam))
    k = np.maximum(k, eps)
    return k / k.sum()


def kl_divergence(p: np.ndarray, q: np.ndarray) -> float:
    """Eq. 11: Σ p log(p / q); terms with p = 0 contribute 0. Both must have the same length."""
    if len(p) != len(q):
        raise ValueError(f"spectra of different lengths: {len(p)} vs {len(q)} (use the same Φ)")
    from scipy.special import rel_entr
    return float(rel_entr(p, q).sum())


def minmax_similarity(rho: np.ndarray, tie: float = 1.0) -> np.ndarray:
    """Eq. 12: ρ̄ = 1 - (ρ - min)/(max - min); ``tie`` for every client when all are equally far
    (Eq. 12 is 0/0 there; the authors' code uses 0.5)."""
    rho = np.asarray(rho, dtype=np.float64)
    span = rho.max() - rho.min()
    if span <= 0:
        return np.full_like(rho, tie)
    return 1.0 - (rho - rho.min()) / span


def single_bin_density(values: np.ndarray) -> float:
    """The authors' code's "distribution" of a spectrum: ``np.histogram(values, bins=1,
    density=True)``, a single number 1 / (max - min) (1.0 when all values are equal)."""
    return float(np.histogram(np.asarray(values, dtype=np.float64), bins=1, density=True)[0][0])


def code_kl(p: float, q: float, eps: float = 1e-10) -> float:
    """The authors' code's KL on two single-bin densities: |(p+ε)·log((p+ε)/(q+ε))|."""
    return float(abs((p + eps) * np.log((p + eps) / (q + eps))))


def max_similarity(rho: np.ndarray) -> np.ndarray:
    """The authors' code's Eq. 12 (``FED_RATIO=['rg','per']``): min forced to 0, ρ̄ = 1 - ρ/max ρ;
    0.5 for every client when max ρ = 0."""
    rho = np.asarray(rho, dtype=np.float64)
    top = rho.max()
    return np.full_like(rho, 0.5) if top == 0 else 1.0 - rho / top


def reference_anchor_sizes(kind: str, total_users: int, total_items: int, total_interactions: int,
                           num_clients: int) -> tuple[int, int, float]:
    """The authors' ``make_subgraph.generate_random_graph``: M_R = round(users/C), N_R = round(items/C),
    GNMK edges int(round(interactions/C)/C) (an extra /C); ER keeps round(interactions/C) edges but
    with p = E/(M_R+N_R)², returned here as the edge count ``anchor_graph`` turns into that p."""
    m, n = int(round(total_users / num_clients)), int(round(total_items / num_clients))
    if kind == "gnmk":
        return m, n, int(round(total_interactions / num_clients) / num_clients)
    e = int(round(total_interactions / num_clients))
    return m, n, e * m * n / (m + n) ** 2


def anchor_graph(kind: str, num_users: int, num_items: int, num_edges: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The server's neutral anchor G_R from averaged client statistics: ``gnmk`` (networkx's
    bipartite gnmk_random_graph with exactly num_edges edges) or ``er`` (bipartite Erdős–Rényi
    with p = edges / (users * items); edges may be fractional there). Returns (users, items) edge arrays."""
    from networkx.algorithms import bipartite

    if kind == "gnmk":
        g = bipartite.gnmk_random_graph(num_users, num_items, num_edges, seed=seed)
    elif kind == "er":
        g = bipartite.random_graph(num_users, num_items, num_edges / (num_users * num_items), seed=seed)
    else:
        raise ValueError(f"anchor must be 'gnmk' or 'er', got {kind!r}")
    e = np.array(list(g.edges()), dtype=np.int64).reshape(-1, 2)
    e.sort(1)   # networkx numbers users 0..M-1 and items M..M+N-1
    return e[:, 0], e[:, 1] - num_users
