"""Spectral utilities: Laplacian spectrum, eigsh vs eigh, LCF idempotence, K, KL, Eq. 12."""
import numpy as np
import torch

from fgx.recsys import losses
from fgx.recsys.spectral import (anchor_graph, bipartite_laplacian, cached_eigenpairs, canonical_basis,
                                 kl_divergence, lowest_eigenpairs, lowpass_distribution, minmax_similarity)


def small_graph(seed=0, m=40, n=60, e=300):
    return anchor_graph("gnmk", m, n, e, seed)


def test_laplacian_spectrum_in_0_2_and_zero_per_component():
    u, i = np.array([0, 0, 1, 2]), np.array([0, 1, 1, 2])   # components {u0,u1,i0,i1} and {u2,i2}
    w = np.linalg.eigvalsh(bipartite_laplacian(u, i, 3, 3).toarray())
    assert w.min() > -1e-9 and w.max() < 2 + 1e-9
    assert (np.abs(w) < 1e-9).sum() == 2


def test_eigsh_agrees_with_dense():
    u, i = small_graph()
    lap = bipartite_laplacian(u, i, 40, 60)
    w_dense, _ = lowest_eigenpairs(lap, 8, dense_below=10_000)
    w_lanczos, v = lowest_eigenpairs(lap, 8, dense_below=0)
    assert np.allclose(w_dense, w_lanczos, atol=1e-6)
    assert np.allclose(v.T @ v, np.eye(8), atol=1e-6)


def _star_forest():
    """Users 0..5 each rating items 2u and 2u+1 only: six identical components, so every eigenvalue of
    the Laplacian (0, 1, 2) is repeated six times or more and the solver's basis is arbitrary."""
    u = np.repeat(np.arange(6), 2)
    return bipartite_laplacian(u, np.arange(12), 6, 12)


def test_repeated_eigenvalues_get_a_basis_independent_of_the_solvers_choice():
    """Any orthonormal basis of a repeated eigenvalue's eigenspace is a valid solver answer (CPUs with
    other BLAS kernels return others); canonical_basis maps every such answer to the same vectors."""
    lap = _star_forest().toarray()
    w, v = np.linalg.eigh(lap)
    assert (np.diff(w) < 1e-9).sum() > 10                        # the case does repeat eigenvalues
    rng = np.random.default_rng(1)
    other = v.copy()                                             # another valid solver answer:
    bounds = np.flatnonzero(np.diff(w) >= 1e-6) + 1
    for a, b in zip(np.r_[0, bounds], np.r_[bounds, len(w)]):
        q, _ = np.linalg.qr(rng.standard_normal((b - a, b - a)))
        other[:, a:b] = v[:, a:b] @ q                            # rotated inside each eigenspace
    assert np.abs(other - v).max() > 0.1
    c1, c2 = canonical_basis(w, v), canonical_basis(w, other)
    np.testing.assert_allclose(c1, c2, atol=1e-10)
    np.testing.assert_allclose(lap @ c1, c1 * w, atol=1e-10)    # still eigenvectors of their eigenvalues
    np.testing.assert_allclose(c1.T @ c1, np.eye(len(w)), atol=1e-10)


def test_lowest_eigenpairs_cut_through_a_repeated_eigenvalue_are_canonical():
    """k = 8 cuts the six-fold eigenvalue 1 (after six zeros): the kept two vectors are the canonical
    basis's first two of the whole eigenspace, whichever basis eigh returned."""
    lap = _star_forest()
    w, v = lowest_eigenpairs(lap, 8)
    w_all, v_all = np.linalg.eigh(lap.toarray())
    np.testing.assert_allclose(v, canonical_basis(w_all, v_all)[:, :8], atol=1e-10)
    rotated = v_all.copy()                                       # another valid answer for eigenvalue 1
    rotated[:, 6:12] = v_all[:, 6:12] @ np.linalg.qr(np.random.default_rng(2).standard_normal((6, 6)))[0]
    np.testing.assert_allclose(v, canonical_basis(w_all, rotated)[:, :8], atol=1e-10)


def test_lanczos_eigenvectors_do_not_depend_on_the_start_vector():
    """eigsh converges to machine precision (tol=0): two start vectors give the same vectors to 1e-9
    (up to sign), so BLAS kernels that round differently do too. With tol=1e-6 they differed by ~1e-6."""
    u, i = anchor_graph("gnmk", 150, 250, 2000, 3)
    lap = bipartite_laplacian(u, i, 150, 250)
    _, v1 = lowest_eigenpairs(lap, 16, dense_below=0, seed=0)
    _, v2 = lowest_eigenpairs(lap, 16, dense_below=0, seed=1)
    sign = np.sign((v1 * v2).sum(0))
    assert np.abs(v1 - v2 * sign).max() < 1e-9


def test_low_pass_projection_keeps_smooth_signals_and_drops_rough_ones():
    """Projecting on the Φ lowest eigenvectors (LGCN's filter basis) keeps a graph-smooth signal (the
    λ = 0 eigenvector) and removes the roughest one (the largest λ)."""
    u, i = small_graph()
    lap = bipartite_laplacian(u, i, 40, 60)
    _, v = lowest_eigenpairs(lap, 8, dense_below=10_000)
    w_all, v_all = np.linalg.eigh(lap.toarray())
    smooth, rough = v_all[:, 0], v_all[:, -1]
    assert w_all[0] < 1e-9 and w_all[-1] > 1.5
    assert np.allclose(v @ (v.T @ smooth), smooth, atol=1e-6)
    assert np.allclose(v @ (v.T @ rough), 0.0, atol=1e-6)


def test_cache_roundtrip(tmp_path):
    u, i = small_graph()
    w1, v1 = cached_eigenpairs(u, i, 40, 60, 6, tmp_path)
    assert len(list(tmp_path.glob("*.npz"))) == 1
    w2, v2 = cached_eigenpairs(u, i, 40, 60, 6, tmp_path)
    assert np.allclose(w1, w2) and np.allclose(v1, v2)


def test_lowpass_distribution_kl_and_minmax():
    k = lowpass_distribution(np.array([0.0, 0.0, 0.1, 0.3]))
    assert abs(k.sum() - 1) < 1e-12 and (k > 0).all()
    assert kl_divergence(k, k) == 0.0
    other = lowpass_distribution(np.array([0.0, 0.2, 0.2, 0.2]))
    assert np.isfinite(kl_divergence(k, other)) and kl_divergence(k, other) > 0
    rb = minmax_similarity(np.array([0.5, 1.0, 2.0]))
    assert rb[0] == 1.0 and rb[2] == 0.0 and 0 < rb[1] < 1
    assert (minmax_similarity(np.array([0.3, 0.3])) == 1.0).all()


def test_losses_prefer_ranking_positive_first():
    good, bad = torch.tensor([0.9]), torch.tensor([-0.9])
    assert losses.bpr_loss(good, bad) < losses.bpr_loss(bad, good)
    m = torch.zeros(1)
    assert losses.bc_loss(good, bad, m, 0.2) < losses.bc_loss(bad, good, m, 0.2)
    # a positive margin makes the same pair costlier (Eq. 9)
    assert losses.bc_loss(good, bad, torch.tensor([0.3]), 0.2) > losses.bc_loss(good, bad, m, 0.2)
    assert float(losses.refined_margin(torch.tensor(1.0), 0.0, 0.5)) == 0.5
