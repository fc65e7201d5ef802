"""The one-run auditing bound of Steinke, Nasr and Jagielski ("Privacy Auditing with One (1) Training
Run", NeurIPS 2023, Theorem 3 and its Appendix-D procedure).

m canaries are each included with probability ½ (S_i = ±1), the run happens once, and the auditor
guesses S_i for r of them (abstaining on the others) from what the run released. If the run is
(ε, δ)-DP with respect to each canary, the number of correct guesses W satisfies

    P[W ≥ v] ≤ P[Binomial(r, e^ε/(1+e^ε)) ≥ v] + 2mδ · max_{1≤i≤v} P[v-i ≤ Binomial(r, e^ε/(1+e^ε)) < v] / i

so ε is rejected at level β when that right-hand side (the p-value) is below β; the audited lower
bound is the largest ε rejected. scipy computes the binomial tails and finds the root."""
from __future__ import annotations

import math

import numpy as np
from scipy.optimize import brentq
from scipy.special import expit
from scipy.stats import binom

# guess counts tried, as fractions of the canaries: half the guesses on the highest scores (S = +1),
# half on the lowest (S = -1); the confidence is split over them (Bonferroni), so taking the best
# of them keeps the stated confidence
GUESS_FRACTIONS = (0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0)


def p_value(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """P[at least v of r guesses correct] under (ε, δ)-DP per canary (Theorem 3), capped at 1."""
    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 <= v <= r <= m, got m={m}, r={r}, v={v}")
    q = float(expit(eps))                                 # accuracy of ε-DP randomised response
    tail = float(binom.sf(v - 1, r, q))                   # P[Binomial(r, q) >= v]
    if delta == 0 or v == 0:
        return min(tail, 1.0)
    below = binom.pmf(np.arange(v - 1, -1, -1), r, q)     # P[B = v-1], P[B = v-2], ..., P[B = 0]
    alpha = float(np.max(np.cumsum(below) / np.arange(1, v + 1)))
    return min(tail + 2 * m * delta * alpha, 1.0)


def epsilon_lower_bound(m: int, r: int, v: int, delta: float, beta: float) -> float:
    """The largest ε whose p-value for (m, r, v) is at most β: the run is not (ε, δ)-DP, with
    confidence 1 - β. 0 when even ε = 0 is not rejected."""
    if p_value(m, r, v, 0.0, delta) > beta:
        return 0.0
    hi = 1.0
    while p_value(m, r, v, hi, delta) <= beta:
        hi *= 2
        if hi > 64:          # expit saturates in float64: every guess right and the tail still below β
            return math.inf
    return float(brentq(lambda e: p_value(m, r, v, e, delta) - beta, 0.0, hi, xtol=1e-6))


def audit(scores, included: np.ndarray, delta: float, confidence: float) -> dict:
    """Guess from ``scores`` (higher: more likely included; one array, or several attacks' arrays by
    name) for each guess count of GUESS_FRACTIONS and return the best bound at the stated confidence,
    which is split over every (attack, guess count) tried."""
    named = scores if isinstance(scores, dict) else {"score": scores}
    included = np.asarray(included, dtype=bool)
    m = len(included)
    if m < 2 or any(len(s) != m for s in named.values()):
        raise ValueError(f"need at least 2 canaries with one score per attack each, got {m} inclusion bits and "
                         f"{[len(s) for s in named.values()]} scores")
    beta = (1.0 - confidence) / (len(GUESS_FRACTIONS) * len(named))
    tried = []
    for name, sc in named.items():
        order = np.argsort(np.asarray(sc, dtype=float), kind="stable")   # ascending: the first guessed excluded
        for frac in GUESS_FRACTIONS:
            half = max(1, int(frac * m) // 2)
            neg, pos = order[:half], order[m - half:]
            r = 2 * half
            v = int(included[pos].sum() + (~included[neg]).sum())
            tried.append({"score": name, "guesses": r, "correct": v,
                          "epsilon_lb": epsilon_lower_bound(m, r, v, delta, beta)})
    best = max(tried, key=lambda t: (t["epsilon_lb"], t["correct"] / t["guesses"]))
    return {"canaries": m, "included": int(included.sum()), "confidence": confidence, "delta": delta,
            "score": best["score"], "guesses": best["guesses"], "correct": best["correct"],
            "epsilon_lb": best["epsilon_lb"], "tried": tried}
