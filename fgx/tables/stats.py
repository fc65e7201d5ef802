"""How an ordering between two methods of a table is decided: one test for both sources of noise, then
Holm's step-down across the table's orderings. The derivation is in docs/tables.md ("How an ordering is
decided"); tests/test_table_stats.py checks its error rates by simulation.

A table compares two methods a and b on seeds s = 1..n; runs of one seed share the partition, the split
and the initialisation, so the claim "a ≥ b" is about the per-seed differences d_s = a_s − b_s (oriented
so that > 0 is the claimed direction). Each d_s is measured on a finite test set, so it carries two
kinds of noise: the seed's (initialisation, partition, training) and the test items'. Where the seeds
share their test items (a split fixed across seeds, as the FedGSP and LPSFed protocols fix it), the
items' part is common to every seed and does not shrink with n: the sample variance of the d_s does
not contain it. The test therefore uses

    Var(mean d) = s_d² / n + V_items

where V_items is the variance of the part of the items' noise the seeds share: over resamples of the
shared test items, each drawn jointly for both methods and every seed that shares the items (the runs
keep replicates drawn from one stream over their items' ids: fgx/resampling.py), the variance of the
seeds' mean difference, less its part that differs from seed to seed (already in s_d²; see
shared_variance). Seeds whose test items are
their own (a split drawn per seed) add nothing to V_items: their items' noise is independent across
seeds and already in s_d². Seeds whose items cannot be matched (no item ids) add the bound
(Σ sd_s / n)², their noise taken as perfectly shared. Records made before runs kept replicates give
only each run's marginal standard error; their term is the same bound with sd_s ≤ se_a + se_b
(the standard deviation of a difference is at most the sum of the two). Without any of these the
ordering has no evaluation-data term and is not decided.

The statistic t = mean d / √Var is referred to Student's t with Satterthwaite's degrees of freedom
ν = Var² / ((s_d²/n)²/(n−1) + V_items²/(B−1)) (B replicates); the 95 % interval is mean ± t_ν √Var and
the two-sided p-value is that of mean d = 0. A table's tested orderings are then adjusted together by
Holm's step-down (family-wise error ≤ 5 % over the table, whatever the dependence between orderings,
directional decisions included): an ordering **holds** when its adjusted p < 0.05 and mean d > 0,
**fails** when adjusted p < 0.05 and mean d < 0, and is **inconclusive** otherwise. Fewer than two
paired seeds, no evaluation-data term, and rows equal on every seed are inconclusive and untested (they
do not enter Holm's count): equality satisfies "≥" literally but is no evidence for what a paper claims.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

LEVEL = 0.95            # two-sided confidence of the interval; Holm-adjusted decisions at ALPHA over the table
ALPHA = 1 - LEVEL
OUTCOMES = ("holds", "fails", "inconclusive")
TEST_NAME = ("paired t-test over seeds plus the test items' paired bootstrap variance (Satterthwaite), "
             "Holm-adjusted across the table's orderings at 5 %")
SIGN_TEST = "(exact sign test)"       # how an ordering with a row that diverged on every seed is decided
NO_DATA = "no evaluation-data term (the runs kept no test-item replicates or standard errors)"


@dataclass
class SeedTerm:
    """One seed's evaluation-data term for the difference of two runs on its test items."""
    reps: np.ndarray | None = None     # bootstrap replicates of the difference, drawn jointly for both runs
    key: str | None = None             # the split both runs were scored on (None: their items have no ids)
    bound: float | None = None         # no replicates: an upper bound of the difference's sd (se_a + se_b)

    @property
    def sd(self) -> float:
        if self.reps is not None:
            v = self.reps[~np.isnan(self.reps)]
            return float(v.std(ddof=1)) if v.size > 1 else float("nan")
        return float(self.bound) if self.bound is not None else float("nan")


def items_variance(terms: list[SeedTerm | None]) -> tuple[float, float, str]:
    """(V_items, its degrees of freedom, how it was found) for the mean over the seeds of ``terms``;
    (nan, nan, NO_DATA) when a seed has no term."""
    n = len(terms)
    if n == 0 or any(t is None or not math.isfinite(t.sd) for t in terms):
        return float("nan"), float("nan"), NO_DATA
    if any(t.reps is None for t in terms):        # a record without replicates: the bound, for every seed
        return (sum(t.sd for t in terms) / n) ** 2, math.inf, \
            "bound (Σ sd/n)² from the runs' standard errors (final round; no test-item replicates)"
    groups: dict[str, list[np.ndarray]] = {}
    unknown = []
    for t in terms:
        (groups.setdefault(t.key, []) if t.key is not None else unknown).append(t)
    v, reps = 0.0, min(t.reps.size for t in terms)
    shared = [g for g in groups.values() if len(g) >= 2]
    for g in shared:
        if len({t.reps.size for t in g}) > 1:      # same split, other draws: cannot happen for one split
            unknown += g
            continue
        v += (len(g) / n) ** 2 * shared_variance(np.stack([t.reps for t in g]))
    if unknown:
        v += (sum(t.sd for t in unknown) / n) ** 2
    how = ("joint bootstrap over the test items shared by the seeds" if shared and not unknown else
           "test items drawn per seed (in the seeds' variance)" if not shared and not unknown else
           "joint bootstrap; seeds without item ids bounded (Σ sd/n)²")
    return v, float(reps - 1), how


def shared_variance(reps: np.ndarray) -> float:
    """The variance of the test items' part that seeds on the same items share, from their joint
    replicates ``reps`` [seeds, B]: the variance of the seeds' mean replicate deviation, less the part
    that varies from seed to seed (its between-seed variance / n), which the seeds' own spread s_d²
    already holds; at least 0. Without the subtraction an item's noise that differs by seed (a model
    that predicts it right on one seed and wrong on another) would be counted twice."""
    dev = reps - np.nanmean(reps, axis=1, keepdims=True)
    dev = dev[:, ~np.isnan(dev).any(axis=0)]
    if dev.shape[1] < 2:
        return float("nan")
    total = float(np.var(dev.mean(axis=0), ddof=1))
    per_seed = float(np.mean(np.var(dev, axis=0, ddof=1)))
    return max(0.0, total - per_seed / dev.shape[0])


@dataclass
class Paired:
    outcome: str                 # holds | fails | inconclusive
    n: int                       # paired seeds
    mean: float                  # mean difference, oriented so that > 0 is the claimed direction
    low: float                   # 95 % interval of the mean difference (same orientation), not adjusted
    high: float
    reason: str = ""             # why inconclusive, when it is
    p: float | None = None       # two-sided p-value of mean d = 0; None: not tested
    p_holm: float | None = None  # Holm-adjusted over the table's tested orderings
    m: int = 0                   # how many orderings Holm adjusted over
    se_seeds: float = float("nan")
    se_items: float = float("nan")
    df: float = float("nan")
    data: str = ""               # how the test items entered

    def describe(self) -> str:
        if self.n == 0:
            return "no paired seeds"
        if self.data.endswith(SIGN_TEST):
            out = f"{self.data}, n = {self.n}, p = {self.p:.3g}"
            out += f", Holm p = {self.p_holm:.3g} (of {self.m})" if self.p_holm is not None else ""
            return out + (f"; {self.reason}" if self.reason else "")
        ci = f"[{self.low:+.4f}, {self.high:+.4f}]" if math.isfinite(self.low) else "no interval"
        out = f"Δ = {self.mean:+.4f}, 95% CI {ci}, n = {self.n}"
        if self.p is not None:
            out += f", SE seeds {self.se_seeds:.4f} + items {self.se_items:.4f}, p = {self.p:.3g}"
            if self.p_holm is not None:
                out += f", Holm p = {self.p_holm:.3g} (of {self.m})"
        return out + (f"; {self.reason}" if self.reason else "")


def paired_outcome(a: dict, b: dict, lower_is_better: bool = False,
                   items: dict | None = None) -> Paired:
    """The test of "a is better than or equal to b" from per-seed values ``{seed: value}`` of both methods
    and, per seed, the evaluation-data term of their difference (``items``: ``{seed: SeedTerm}``, oriented
    as a − b; None or a missing seed: no term, not decided). Unadjusted: :func:`holm` decides a table's
    orderings together."""
    from scipy import stats

    sign = -1.0 if lower_is_better else 1.0
    seeds = sorted(set(a) & set(b), key=str)
    seeds = [s for s in seeds if a[s] == a[s] and b[s] == b[s]]
    d = [sign * (a[s] - b[s]) for s in seeds]
    n = len(d)
    if n == 0:
        return Paired("inconclusive", 0, float("nan"), float("nan"), float("nan"), "no seed run by both")
    mean = sum(d) / n
    if n < 2:
        return Paired("inconclusive", n, mean, float("-inf"), float("inf"), "one paired seed: no test")
    if all(x == 0 for x in d):
        return Paired("inconclusive", n, mean, 0.0, 0.0, "equal on every seed")
    terms = [None if items is None or items.get(s) is None else
             SeedTerm(sign * items[s].reps if items[s].reps is not None else None, items[s].key, items[s].bound)
             for s in seeds]
    v_items, df_items, how = items_variance(terms)
    a_seeds = sum((x - mean) ** 2 for x in d) / (n - 1) / n
    if not math.isfinite(v_items):
        half = stats.t.ppf(0.5 + LEVEL / 2, n - 1) * math.sqrt(a_seeds) if a_seeds > 0 else 0.0
        return Paired("inconclusive", n, mean, mean - half, mean + half, NO_DATA, data=NO_DATA,
                      se_seeds=math.sqrt(a_seeds))
    total = a_seeds + v_items
    if total == 0.0:           # the same difference on every seed and no item noise: the point itself
        p, df, half = 0.0, math.inf, 0.0
    else:
        denom = (a_seeds ** 2 / (n - 1) if a_seeds > 0 else 0.0) + \
            (v_items ** 2 / df_items if v_items > 0 and math.isfinite(df_items) else 0.0)
        df = total ** 2 / denom if denom > 0 else math.inf
        se = math.sqrt(total)
        p = float(2 * stats.t.sf(abs(mean) / se, df))
        half = float(stats.t.ppf(0.5 + LEVEL / 2, df)) * se
    res = Paired("inconclusive", n, mean, mean - half, mean + half, p=p, se_seeds=math.sqrt(a_seeds),
                 se_items=math.sqrt(v_items), df=df, data=how)
    return decide(res, p)


def divergence_outcome(a_ran: set[str], a_diverged: set[str], b_ran: set[str], b_diverged: set[str],
                       a: str, b: str) -> Paired:
    """The test of "a is better than b" where one of the two rows diverged on every seed it ran: a run that
    diverged lost its seed to one that completed (its loss grew without bound; no value of the metric is
    worse). Under the null that the two methods are exchangeable, which of the two diverges on a seed where
    only one does is a fair coin, so the seeds where only one diverged are referred to the exact two-sided
    sign test (scipy's ``binomtest``): all n seeds one way give p = 2 · 2⁻ⁿ (n = 5: 0.0625, no decision at
    5 %; n ≥ 6 can decide). Unadjusted, like :func:`paired_outcome` (Holm decides the table together)."""
    from scipy.stats import binomtest

    wins = sorted(a_ran & b_diverged, key=str)          # seeds where b diverged and a completed
    losses = sorted(a_diverged & b_ran, key=str)
    n = len(wins) + len(losses)
    who = f"{b} diverged on every seed it ran" if b_diverged and not b_ran else f"{a} diverged on every seed it ran"
    how = f"{who}; seeds where only one diverged: {len(wins)} won by {a}, {len(losses)} by {b} {SIGN_TEST}"
    if n == 0:
        return Paired("inconclusive", 0, float("nan"), float("nan"), float("nan"),
                      "no seed where one row diverged and the other completed", data=how)
    mean = math.inf if len(wins) > len(losses) else -math.inf if len(losses) > len(wins) else 0.0
    p = float(binomtest(len(wins), n, 0.5).pvalue)
    res = Paired("inconclusive", n, mean, mean, mean, p=p, data=how)
    return decide(res, p)


def decide(res: Paired, p: float) -> Paired:
    """The outcome at ALPHA for the p-value ``p`` (raw, or Holm-adjusted)."""
    if p < ALPHA:
        res.outcome, res.reason = ("holds", "") if res.mean > 0 else ("fails", "")
    else:
        res.outcome = "inconclusive"
        first = f"p ≥ {ALPHA:g}" if res.data.endswith(SIGN_TEST) else "the interval contains 0"
        res.reason = first if res.p_holm is None or res.p >= ALPHA else \
            f"not significant after Holm's adjustment over {res.m} orderings"
    return res


def holm(ps: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (the family-wise error over the list is at most the level at
    which they are compared): p_(i) · (m − i + 1), made monotone, capped at 1."""
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])
    out, running = [1.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * ps[i]))
        out[i] = running
    return out


def adjust(tests: list[Paired]) -> None:
    """Holm over the tested orderings of one table, in place: each gets its adjusted p and outcome."""
    tested = [t for t in tests if t.p is not None]
    for t, q in zip(tested, holm([t.p for t in tested])):
        t.p_holm, t.m = q, len(tested)
        decide(t, q)
