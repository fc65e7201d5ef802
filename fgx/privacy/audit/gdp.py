"""The Gaussian (GDP) audit of a Gaussian mechanism's canaries, with its power.

Steinke, Nasr and Jagielski's one-run bound (bound.py) holds for any mechanism but is loose for Gaussian
noise: with (ε, δ) at δ = 1e-5 dominated by the Gaussian tail, its lower bound stays near a third of the
true ε, so a mechanism releasing twice its claimed ε passes (noise ÷2 on dp_fedavg: 2.87 against a claim
of 4.01). For the mechanisms whose noise is Gaussian (dp_fedavg, metric_dp), each canary's per-release
projections are Gaussian with a mean set by its inclusion, so the membership of a canary is a test
between two Gaussians: the mechanism is μ-GDP per canary (Dong, Roth and Su 2022) with μ their
Mahalanobis distance. The audit estimates it:

1. per canary, the vector y_i of its projections (one per release) and its template s_i (the shape of
   its contribution: the per-release signs the canary client chose);
2. two folds: the noise covariance Σ of one fold's residuals (y minus each group's fitted
   contribution) whitens the other fold's canaries, t_i = s_iᵀΣ⁻¹y_i / √(s_iᵀΣ⁻¹s_i) (the matched filter;
   noise reused across releases makes Σ nearly singular and the filter exploits it);
3. μ̂ = (mean t_in − mean t_out) / pooled sd, with its normal-approximation standard error
   √(1/n_in + 1/n_out + μ̂²/(2n)), and the lower bound μ_lb = μ̂ − z·se at the audit's confidence;
4. ε_lb = the exact ε of μ_lb-GDP at the claim's δ, compared with the claimed ε.

Valid where the canary scores are Gaussian (the mechanism's own noise model; not for Laplace noise,
where the Steinke bound stays the audit); an honest Gaussian mechanism has μ ≤ the μ of its claim (an RDP
accountant's ε is at least the exact GDP ε), so its false alarm rate is at most 1 − confidence
(tests/test_dp_audit.py simulates it). Power: a mechanism releasing k× its claimed ε has
μ_k = gdp_mu(k ε, δ); it is caught with probability Φ((μ_k − μ_claim)/se(μ_k) − z), and
``canaries_for_power`` solves that for the number of canaries (docs/privacy_audit.md, *Power*)."""
from __future__ import annotations

import math

import numpy as np
from scipy.optimize import brentq
from scipy.stats import norm


def gdp_delta(mu: float, eps: float) -> float:
    """δ(ε) of μ-GDP: Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (Dong, Roth and Su 2022, Corollary 2.13)."""
    if mu <= 0:
        return 0.0
    return float(norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2))


def gdp_epsilon(mu: float, delta: float) -> float:
    """The smallest ε with μ-GDP ⟹ (ε, δ)-DP (0 when even ε = 0 holds)."""
    if mu <= 0 or gdp_delta(mu, 0.0) <= delta:
        return 0.0
    hi = 1.0
    while gdp_delta(mu, hi) > delta:
        hi *= 2
    return float(brentq(lambda e: gdp_delta(mu, e) - delta, 0.0, hi, xtol=1e-9))


def gdp_mu(eps: float, delta: float) -> float:
    """The μ whose exact (ε, δ) is ``eps``: the GDP parameter of a Gaussian mechanism claiming (ε, δ)."""
    hi = 1.0
    while gdp_epsilon(hi, delta) < eps:
        hi *= 2
    return float(brentq(lambda m: gdp_epsilon(m, delta) - eps, 1e-9, hi, xtol=1e-9))


def separation_se(mu: float, n_in: int, n_out: int) -> float:
    """Standard error of the standardised mean difference of two Gaussian samples."""
    n = n_in + n_out
    return math.sqrt(1 / max(n_in, 1) + 1 / max(n_out, 1) + mu * mu / (2 * max(n, 1)))


def power(eps_claim: float, delta: float, canaries: int, inflation: float = 2.0, confidence: float = 0.95) -> float:
    """Probability that a mechanism releasing ``inflation`` × its claimed ε is caught with ``canaries``
    canaries (half included) at ``confidence``."""
    mu_c, mu_k = gdp_mu(eps_claim, delta), gdp_mu(inflation * eps_claim, delta)
    z = norm.ppf(confidence)
    se = separation_se(mu_k, canaries // 2, canaries - canaries // 2)
    return float(norm.cdf((mu_k - mu_c) / se - z))


def canaries_for_power(eps_claim: float, delta: float, target: float = 0.9, inflation: float = 2.0,
                       confidence: float = 0.95) -> int:
    """The fewest canaries whose ``power`` reaches ``target``."""
    m = 4
    while power(eps_claim, delta, m, inflation, confidence) < target:
        m *= 2
    lo, hi = m // 2, m
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if power(eps_claim, delta, mid, inflation, confidence) < target else (lo, mid)
    return hi


def _whitened_scores(y: np.ndarray, template: np.ndarray, included: np.ndarray, fit: np.ndarray,
                     use: np.ndarray) -> np.ndarray:
    """Matched-filter scores of the canaries ``use`` with the noise covariance of the canaries ``fit``."""
    resid = []
    for group in (True, False):
        g = fit & (included == group)
        if g.sum() < 2:
            continue
        s, yy = template[g], y[g]
        c = float((s * yy).sum() / max((s * s).sum(), 1e-300))      # the group's fitted contribution per release
        resid.append(yy - c * s)
    r = np.vstack(resid)
    cov = np.atleast_2d(np.cov(r, rowvar=False))
    cov = cov + 1e-12 * max(float(np.trace(cov)), 1e-300) / cov.shape[0] * np.eye(cov.shape[0])
    prec = np.linalg.inv(cov)
    s = template[use]
    num = np.einsum("ij,jk,ik->i", s, prec, y[use])
    den = np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", s, prec, s), 1e-300))
    return num / den


def gdp_audit(y, template, included, delta: float, confidence: float, eps_claim: float | None,
              seed: int = 0) -> dict:
    """The GDP audit of one run's canaries: ``y`` and ``template`` (m x T: per canary, its projection and its
    contribution's shape per release), ``included`` (m bools). Returns μ̂, its lower bound, the ε lower bound
    at ``delta`` and, given the claim, the claim's μ and this audit's power against a 2× inflation."""
    y = np.asarray(y, dtype=float).reshape(len(included), -1)
    template = np.asarray(template, dtype=float).reshape(y.shape)
    included = np.asarray(included, dtype=bool)
    m = len(included)
    fold = np.random.default_rng([seed, 4242]).random(m) < 0.5
    t = np.empty(m)
    for f in (True, False):
        t[fold == f] = _whitened_scores(y, template, included, fold != f, fold == f)
    t_in, t_out = t[included], t[~included]
    sd = math.sqrt(((t_in - t_in.mean()) ** 2).sum() + ((t_out - t_out.mean()) ** 2).sum()) / math.sqrt(max(m - 2, 1))
    mu_hat = float((t_in.mean() - t_out.mean()) / max(sd, 1e-300))
    z = float(norm.ppf(confidence))
    mu_lb = mu_hat - z * separation_se(mu_hat, len(t_in), len(t_out))
    out = {"mu_hat": mu_hat, "mu_lb": mu_lb, "epsilon_lb": gdp_epsilon(max(mu_lb, 0.0), delta),
           "releases": int(y.shape[1]), "confidence": confidence, "scores": t}
    if eps_claim is not None and math.isfinite(eps_claim) and eps_claim > 0:
        out.update(mu_claim=gdp_mu(eps_claim, delta), power_2x=power(eps_claim, delta, m, 2.0, confidence),
                   canaries_for_90_percent_power=canaries_for_power(eps_claim, delta, 0.9, 2.0, confidence))
    return out
