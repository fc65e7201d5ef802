"""Participation schemes (which steps a record's gradient enters), time-major indexing.

(k, b) cyclic (Choquette-Choo et al. 2023): the data of a node is split into b batches used in turn,
so a record takes part in steps j, j + b, ..., j + (k-1) b for one j in 0..b-1 (T = k b).
User level (Cyffers et al. 2022): every step, i.e. (k, b) = (T, 1)."""
from __future__ import annotations

import numpy as np


def local_patterns(steps: int, b: int) -> list[np.ndarray]:
    """Patterns over the T local steps: [j, j + b, ...] for j in 0..b-1 (all steps < T)."""
    if b < 1 or b > steps:
        raise ValueError(f"participation b={b} must lie in [1, T={steps}]")
    return [np.arange(j, steps, b) for j in range(b)]


def node_patterns(n: int, steps: int, b: int, node: int) -> list[np.ndarray]:
    """The same patterns in the nT time-major rows of one node (Remark 8)."""
    return [p * n + node for p in local_patterns(steps, b)]


def same_class_mask(steps: int, b: int) -> np.ndarray:
    """Boolean T × T mask of distinct steps in one participation class (s ≡ t mod b)."""
    idx = np.arange(steps)
    m = (idx[:, None] % b) == (idx[None, :] % b)
    np.fill_diagonal(m, False)
    return m
