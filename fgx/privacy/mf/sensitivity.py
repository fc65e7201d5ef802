"""Sensitivity of G ↦ CG, and the generalised sens_Π(C; B) of Theorem 7 through the projector B^†B.

Theorem 7 as printed bounds sens by Σ_{s,t∈π} |(CᵀB^†BC)_{s,t}|; dimensionally that is sens² (for
C = I and k participations the sum is k), which is what fgx returns (as the authors' code does).

Three upper bounds on sens² for one participation pattern π, X_ππ = the victim's Gram on π:
``abs_sum`` Σ_{s,t∈π} |X_st| (the paper's and the authors' code), ``lambda_max`` |π|·λ_max(X_ππ)
(since a change Δ with ‖Δ_s‖ <= 1 on π has ‖Δ‖_F² <= |π|), and ``abs_sum_capped`` (fgx's default),
the smaller of the two and, for a trust model other than LDP, of the victim's LDP sens² (the
attacker's projector can only remove information: CᵀB^†BC ⪯ CᵀC)."""
from __future__ import annotations

import numpy as np

from fgx.privacy.mf.participation import local_patterns

BOUNDS = ("abs_sum_capped", "abs_sum", "lambda_max")


def pattern_bound(x: np.ndarray, bound: str = "abs_sum_capped") -> float:
    """sens² bound of one pattern from its Gram block X_ππ."""
    if bound not in BOUNDS:
        raise ValueError(f"sens_bound must be one of {list(BOUNDS)}, got {bound!r}")
    abs_sum = float(np.abs(x).sum())
    if bound == "abs_sum":
        return abs_sum
    lam = float(len(x) * max(np.linalg.eigvalsh(0.5 * (x + x.T))[-1], 0.0))
    return lam if bound == "lambda_max" else min(abs_sum, lam)


def sens2_from_gram(x: np.ndarray, patterns, bound: str = "abs_sum_capped", cap: np.ndarray | None = None) -> float:
    """max over patterns π of the bound on X_ππ, X = C'ᵀ(B^†B)C' (abs_sum is tight when X_ππ >= 0).
    ``cap`` (one value per pattern, e.g. the LDP sens² of the same pattern) bounds each pattern from
    above when ``bound`` is abs_sum_capped."""
    vals = pattern_values(x, patterns, bound)
    if cap is not None and bound == "abs_sum_capped":
        vals = np.minimum(vals, cap)
    return float(vals.max())


def pattern_values(x: np.ndarray, patterns, bound: str = "abs_sum_capped") -> np.ndarray:
    """The bound of every pattern (the LDP cap is applied by the caller)."""
    return np.array([pattern_bound(x[np.ix_(p, p)], bound) for p in patterns])


def local_sens2(c_local: np.ndarray, b: int, bound: str = "abs_sum_capped") -> float:
    """LDP sensitivity² of C = C_local ⊗ I_n under (k, b) participation: B = 𝐖_T C^{-1} is square
    and invertible, so B^†B = I and only the T × T Gram C_localᵀC_local matters."""
    return sens2_from_gram(c_local.T @ c_local, local_patterns(c_local.shape[0], b), bound)


def projector(b: np.ndarray, rcond: float = 1e-10) -> np.ndarray:
    """B^†B, the orthogonal projector onto B's row space, from an SVD (B = UΣVᵀ, rank r: V_r V_rᵀ)."""
    _, s, vt = np.linalg.svd(b, full_matrices=False)
    r = int((s > rcond * max(b.shape) * (s[0] if s.size else 0.0)).sum())
    return vt[:r].T @ vt[:r]
