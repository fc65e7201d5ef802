"""Constrained matrix-factorisation solver for (k, b) cyclic participation.

Minimises tr(H X^{-1}) over X = C_localᵀC_local ≻ 0 subject to X_st = 0 for distinct s ≡ t (mod b)
and Σ_{s∈π} X_ss = 1 for every participation class π (so sens² = 1). The algorithm follows the
primal method of Choquette-Choo et al. (2023, google-research multi_epoch_dp_matrix_factorization):
projected gradient with a one-pair L-BFGS direction and backtracking that rejects non-PD steps.
Written here because no maintained Python library ships it without pulling JAX (jax-privacy)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.linalg import cho_factor, cho_solve, cholesky, LinAlgError

from fgx.privacy.mf.participation import same_class_mask


STATUSES = ("converged", "stalled", "max_iter")


@dataclass
class SolverResult:
    x: np.ndarray
    objective: float       # tr(H X^{-1}) with sens² = 1
    iterations: int
    status: str            # converged: the last step moved X by <= tol; stalled: the line search
                           # found no decrease (floating-point floor, or not yet stationary);
                           # max_iter: stopped by the iteration limit
    grad_ratio: float      # max |projected gradient| at the end / at the start (0 at a stationary point)

    @property
    def converged(self) -> bool:
        return self.status == "converged"


def _inv_pd(x: np.ndarray):
    try:
        f = cho_factor(x, lower=True, check_finite=False)
    except LinAlgError:
        return None
    return cho_solve(f, np.eye(len(x)), check_finite=False)


def _project(g: np.ndarray, mask: np.ndarray, classes: np.ndarray, b: int) -> np.ndarray:
    """Tangent-space projection: zero the constrained off-diagonals, and keep every class's
    diagonal sum fixed by removing the class mean of the diagonal gradient."""
    g = 0.5 * (g + g.T)
    g[mask] = 0.0
    d = np.diagonal(g).copy()
    means = np.bincount(classes, weights=d, minlength=b) / np.bincount(classes, minlength=b)
    g[np.diag_indices_from(g)] = d - means[classes]
    return g


def optimise_gram(h: np.ndarray, k: int, b: int, max_iter: int = 10_000, tol: float = 1e-8) -> SolverResult:
    steps = h.shape[0]
    if steps != k * b:
        raise ValueError(f"T={steps} must equal k*b={k}*{b}")
    mask = same_class_mask(steps, b)
    classes = np.arange(steps) % b
    x = np.eye(steps) / k
    xinv = _inv_pd(x)
    loss = float(np.sum(h * xinv))
    grad = _project(-xinv @ h @ xinv, mask, classes, b)
    grad0 = float(np.max(np.abs(grad))) or 1.0
    prev = None
    status = "max_iter"
    it = 0
    for it in range(1, max_iter + 1):
        direction = -grad
        if prev is not None:
            # one-pair L-BFGS two-loop recursion
            s, y = prev
            sy = float(np.sum(s * y))
            if sy > 1e-300:
                a = float(np.sum(s * grad)) / sy
                q = grad - a * y
                q *= sy / float(np.sum(y * y))
                beta = float(np.sum(y * q)) / sy
                direction = -(q + (a - beta) * s)
        step, accepted = 1.0, False
        for _ in range(30):
            cand = x + step * direction
            cinv = _inv_pd(cand)
            if cinv is not None:
                cl = float(np.sum(h * cinv))
                if cl < loss:
                    accepted = True
                    break
            step *= 0.25
        if not accepted:
            status = "stalled"
            break
        dx = cand - x
        new_grad = _project(-cinv @ h @ cinv, mask, classes, b)
        prev = (dx, new_grad - grad)
        x, xinv, loss, grad = cand, cinv, cl, new_grad
        if np.max(np.abs(dx)) <= tol:
            status = "converged"
            break
    return SolverResult(x=x, objective=loss, iterations=it, status=status,
                        grad_ratio=float(np.max(np.abs(grad))) / grad0)


def lower_factor(x: np.ndarray) -> np.ndarray:
    """Lower-triangular C with CᵀC = X: C = P chol(P X P)ᵀ P (P the anti-diagonal flip), so
    C^{-1} is lower-triangular and the correlated noise C^{-1} z is causal (streamable)."""
    flip = x[::-1, ::-1]
    lower = cholesky(flip, lower=True)
    return lower.T[::-1, ::-1].copy()


def surrogate_objective(h: np.ndarray, c_local: np.ndarray, sens2: float) -> float:
    """ℒ_opti = sens² · tr(C^{-T} H C^{-1}) (Definition 9 reduced by Lemma 10)."""
    cinv = np.linalg.inv(c_local)
    return float(sens2 * np.trace(cinv.T @ h @ cinv))
