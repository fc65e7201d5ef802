"""How an ordering between two methods of a table is decided: on paired seeds, with a stated test.

Runs of one seed share the partition, the split and the initialisation across the methods of a table,
so "a ≥ b" is a statement about the per-seed differences d_s = a_s − b_s. fgx decides it with the
paired t-interval: the 95 % confidence interval of the mean difference (Student's t with n − 1
degrees of freedom, scipy). Three outcomes:

- **holds**: the interval lies above 0 (a one-sided paired t-test at 0.025 in the claimed direction);
- **fails**: the interval lies below 0 (significant the other way);
- **inconclusive**: the interval contains 0, fewer than two paired seeds, or the gap is smaller than
  the test split's own sampling error (a bootstrap over test items, measured in each run): a gap that
  one prediction can move is not a result. Two rows equal on every seed are inconclusive too, and say
  so: equality satisfies "≥" literally, but it is no evidence for the ordering a paper claims (a
  method ahead of another), and a test of equivalence is not what a table's "≥" states.

The t-interval is chosen over a paired bootstrap or Wilcoxon's test because tables have 3–5 seeds:
the exact Wilcoxon test cannot reach 0.05 below 5 pairs, and a bootstrap over 3 pairs has no
resolution. Its normality assumption is stated wherever a table is printed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

LEVEL = 0.95            # two-sided confidence of the interval; each direction is a one-sided test at 0.025
OUTCOMES = ("holds", "fails", "inconclusive")
TEST_NAME = "paired t-interval, 95 %"


@dataclass
class Paired:
    outcome: str                 # holds | fails | inconclusive
    n: int                       # paired seeds
    mean: float                  # mean difference, oriented so that > 0 is the claimed direction
    low: float                   # confidence interval of the mean difference (same orientation)
    high: float
    reason: str = ""             # why inconclusive, when it is

    def describe(self) -> str:
        if self.n == 0:
            return "no paired seeds"
        ci = f"[{self.low:+.4f}, {self.high:+.4f}]" if math.isfinite(self.low) else "no interval"
        return f"Δ = {self.mean:+.4f}, 95% CI {ci}, n = {self.n}" + (f"; {self.reason}" if self.reason else "")


def paired_outcome(a: dict, b: dict, lower_is_better: bool = False, sampling_error: float | None = None) -> Paired:
    """Decide "a is better than or equal to b" from per-seed values ``{seed: value}`` of both methods.

    ``sampling_error``: the standard error of the metric on the test split (from its items); when the
    mean gap is below it the outcome is inconclusive whatever the seeds say."""
    from scipy import stats

    seeds = sorted(set(a) & set(b), key=str)
    d = [(b[s] - a[s]) if lower_is_better else (a[s] - b[s]) for s in seeds]
    d = [x for x in d if x == x]
    n = len(d)
    if n == 0:
        return Paired("inconclusive", 0, float("nan"), float("nan"), float("nan"), "no seed run by both")
    mean = sum(d) / n
    if n < 2:
        return Paired("inconclusive", n, mean, float("-inf"), float("inf"), "one paired seed: no test")
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    # the interval as scipy's ttest_rel(...).confidence_interval gives it (tests/test_table_stats.py), written
    # out because ttest_rel returns nan when every seed's difference is the same
    if sd == 0.0:
        # identical differences on every seed: the interval is the point itself
        low = high = mean
    else:
        half = stats.t.ppf(0.5 + LEVEL / 2, n - 1) * sd / math.sqrt(n)
        low, high = mean - half, mean + half
    if sampling_error is not None and sampling_error == sampling_error and abs(mean) < sampling_error:
        return Paired("inconclusive", n, mean, low, high,
                      f"|Δ| below the test split's sampling error ({sampling_error:.4f})")
    if all(x == 0 for x in d):
        return Paired("inconclusive", n, mean, low, high, "equal on every seed")
    if low > 0:
        return Paired("holds", n, mean, low, high)
    if high < 0:
        return Paired("fails", n, mean, low, high)
    return Paired("inconclusive", n, mean, low, high, "the interval contains 0")
