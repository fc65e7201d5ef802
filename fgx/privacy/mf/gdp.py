"""μ-GDP conversions. μ → (ε, δ) is the Dong et al. (2022) dual, taken from Opacus
(``opacus.accountants.analysis.gdp.eps_from_mu``); μ → RDP is (α, αμ²/2)."""
from __future__ import annotations

import math


def eps_from_mu(mu: float, delta: float) -> float:
    from opacus.accountants.analysis.gdp import eps_from_mu as _eps
    if mu <= 0:
        return 0.0
    return float(_eps(mu=mu, delta=delta))


def mu_from_eps(eps: float, delta: float) -> float:
    """The μ whose (ε, δ) curve passes through (eps, delta): bisection on eps_from_mu (monotone)."""
    lo, hi = 1e-6, 100.0
    for _ in range(100):
        mid = math.sqrt(lo * hi)
        if eps_from_mu(mid, delta) > eps:
            hi = mid
        else:
            lo = mid
    return math.sqrt(lo * hi)


def rdp_from_mu(mu: float, alpha: float = 2.0) -> float:
    return alpha * mu * mu / 2.0


def compose(mus) -> float:
    return math.sqrt(sum(m * m for m in mus))
