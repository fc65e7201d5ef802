"""Sensitivity of G ↦ CG, and the generalised sens_Π(C; B) of Theorem 7 through the projector B^†B.

Theorem 7 as printed bounds sens by Σ_{s,t∈π} |(CᵀB^†BC)_{s,t}|; dimensionally that is sens² (for
C = I and k participations the sum is k), which is what fgx returns (as the authors' code does)."""
from __future__ import annotations

import numpy as np

from fgx.privacy.mf.participation import local_patterns


def sens2_from_gram(x: np.ndarray, patterns) -> float:
    """max over patterns π of Σ_{s,t∈π} |X_st| with X = C'ᵀ(B^†B)C' (tight when X_ππ >= 0)."""
    return float(max(np.abs(x[np.ix_(p, p)]).sum() for p in patterns))


def local_sens2(c_local: np.ndarray, b: int) -> float:
    """LDP sensitivity² of C = C_local ⊗ I_n under (k, b) participation: B = 𝐖_T C^{-1} is square
    and invertible, so B^†B = I and only the T × T Gram C_localᵀC_local matters."""
    return sens2_from_gram(c_local.T @ c_local, local_patterns(c_local.shape[0], b))


def projector(b: np.ndarray, rcond: float = 1e-10) -> np.ndarray:
    """B^†B, the orthogonal projector onto B's row space, from an SVD (B = UΣVᵀ, rank r: V_r V_rᵀ)."""
    _, s, vt = np.linalg.svd(b, full_matrices=False)
    r = int((s > rcond * max(b.shape) * (s[0] if s.size else 0.0)).sum())
    return vt[:r].T @ vt[:r]
