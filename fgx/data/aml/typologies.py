"""The eight AMLworld laundering typologies as edge lists over a pattern's member slots.

Each builder draws a pattern's size and returns ``(num_members, src, dst)`` with ``src/dst`` indices
into the pattern's members, in the order the transactions happen (hop by hop)."""
from __future__ import annotations

import numpy as np


def fan_out(rng):
    k = int(rng.integers(3, 11))
    return k + 1, np.zeros(k, dtype=np.int64), np.arange(1, k + 1)


def fan_in(rng):
    k = int(rng.integers(3, 11))
    return k + 1, np.arange(1, k + 1), np.zeros(k, dtype=np.int64)


def cycle(rng):
    k = int(rng.integers(3, 9))
    src = np.arange(k)
    return k, src, (src + 1) % k


def scatter_gather(rng):
    k = int(rng.integers(3, 8))
    mid = np.arange(1, k + 1)
    src = np.concatenate([np.zeros(k, dtype=np.int64), mid])
    dst = np.concatenate([mid, np.full(k, k + 1)])
    return k + 2, src, dst


def gather_scatter(rng):
    a, b = int(rng.integers(3, 7)), int(rng.integers(3, 7))
    ins, outs = np.arange(1, a + 1), np.arange(a + 1, a + b + 1)
    src = np.concatenate([ins, np.zeros(b, dtype=np.int64)])
    dst = np.concatenate([np.zeros(a, dtype=np.int64), outs])
    return a + b + 1, src, dst


def _complete_bipartite(left: np.ndarray, right: np.ndarray):
    return np.repeat(left, right.size), np.tile(right, left.size)


def bipartite(rng):
    a, b = int(rng.integers(2, 5)), int(rng.integers(2, 5))
    src, dst = _complete_bipartite(np.arange(a), np.arange(a, a + b))
    return a + b, src, dst


def stack(rng):
    a, b, c = (int(v) for v in rng.integers(2, 4, size=3))
    l1, l2, l3 = np.arange(a), np.arange(a, a + b), np.arange(a + b, a + b + c)
    s1, d1 = _complete_bipartite(l1, l2)
    s2, d2 = _complete_bipartite(l2, l3)
    return a + b + c, np.concatenate([s1, s2]), np.concatenate([d1, d2])


def random_walk(rng):
    """Money hops between a group's accounts along a random walk (consecutive edges chain)."""
    k = int(rng.integers(4, 9))
    hops = k + int(rng.integers(0, 3))
    walk = [0]
    for _ in range(hops):
        nxt = int(rng.integers(0, k - 1))
        walk.append(nxt if nxt < walk[-1] else nxt + 1)   # any member but the current one
    walk = np.asarray(walk)
    return k, walk[:-1], walk[1:]


BUILDERS = {
    "fan_out": fan_out, "fan_in": fan_in, "cycle": cycle, "scatter_gather": scatter_gather,
    "gather_scatter": gather_scatter, "bipartite": bipartite, "stack": stack, "random": random_walk,
}
