"""Temporal train/val/test splits of transactions: the paper's day ranges, or Multi-GNN's
60/20/20 by time."""
from __future__ import annotations

import numpy as np

from fgx.data.base import DataError


def day_split(day: np.ndarray, days: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Masks for inclusive day ranges ((train_lo, train_hi), (val_lo, val_hi), (test_lo, test_hi));
    days outside every range are in no split."""
    (a0, a1), (b0, b1), (c0, c1) = days
    if not (a0 <= a1 < b0 <= b1 < c0 <= c1):
        raise DataError(f"dataset.split_days {days}: ranges must be ordered and disjoint")
    return (day >= a0) & (day <= a1), (day >= b0) & (day <= b1), (day >= c0) & (day <= c1)


def fraction_split(time: np.ndarray, train: float = 0.6, val: float = 0.2):
    """First ``train`` of the transactions by time, the next ``val``, the rest. Ties at a cut-off
    go to the earlier split, so no later-split transaction precedes an earlier-split one."""
    if not (0 < train < 1 and 0 < val < 1 and train + val < 1):
        raise DataError(f"split fractions train={train}, val={val} must be in (0, 1) with train + val < 1")
    n = time.size
    order = np.sort(time)
    t_train = order[max(0, int(round(train * n)) - 1)]
    t_val = order[max(0, int(round((train + val) * n)) - 1)]
    return time <= t_train, (time > t_train) & (time <= t_val), time > t_val
