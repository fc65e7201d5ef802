"""Generated user-item interactions with community structure, unequal community sizes and
degree skew: the offline stand-in for the structurally imbalanced client subgraphs LPSFed studies.

Users and items belong to ``communities``; community c's share of users and items is proportional
to ``size_ratio**c`` (1 = equal), and its users' mean number of interactions to
``degree_ratio**c`` (1 = equal density). Per-user counts are drawn from a Pareto (``degree_skew``)
around that mean; each interaction picks, with probability ``in_community``, an item of the user's
own community, else any item, Zipf-weighted by item popularity (``popularity_exponent``)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fgx.config import spec
from fgx.data.base import DataEnv, GraphDataset
from fgx.data.movielens import RatingsFilter, build_ranking_dataset
from fgx.recsys.bipartite import densify
from fgx.registry import DATASETS


@dataclass
class SyntheticBipartiteParams(RatingsFilter):
    num_users: int = field(default=1000, metadata=spec(min=4))
    num_items: int = field(default=1500, metadata=spec(min=4))
    communities: int = field(default=4, metadata=spec(min=1))
    size_ratio: float = field(default=0.6, metadata=spec(gt=0.0, max=1.0, help="community c's share ∝ ratio**c"))
    degree_ratio: float = field(default=0.6, metadata=spec(gt=0.0, max=1.0, help="community c's mean degree ∝ ratio**c"))
    mean_degree: float = field(default=60.0, metadata=spec(gt=1.0, help="mean interactions of community 0's users"))
    min_degree: int = field(default=5, metadata=spec(min=1))
    degree_skew: float = field(default=2.5, metadata=spec(gt=1.0, help="Pareto shape of user degrees (smaller = heavier tail)"))
    popularity_exponent: float = field(default=0.8, metadata=spec(min=0.0, help="Zipf exponent of item popularity"))
    in_community: float = field(default=0.85, metadata=spec(min=0.0, max=1.0))
    seed: int | None = field(default=None, metadata=spec(help="generator seed; null: the run's seed"))


def community_sizes(total: int, k: int, ratio: float) -> np.ndarray:
    share = ratio ** np.arange(k)
    sizes = np.maximum(1, np.floor(total * share / share.sum())).astype(int)
    sizes[0] += total - sizes.sum()
    return sizes


def generate(p: SyntheticBipartiteParams, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    k = p.communities
    user_comm = np.repeat(np.arange(k), community_sizes(p.num_users, k, p.size_ratio))
    item_comm = np.repeat(np.arange(k), community_sizes(p.num_items, k, p.size_ratio))
    pop = rng.permutation(p.num_items) + 1.0
    weight = pop ** -p.popularity_exponent
    comm_items = [np.flatnonzero(item_comm == c) for c in range(k)]
    # inverse-CDF sampling with precomputed CDFs (rng.choice(p=...) rebuilds the CDF on every call)
    comm_cdf = [np.cumsum(weight[ix]) / weight[ix].sum() for ix in comm_items]
    all_cdf = np.cumsum(weight) / weight.sum()
    users, items = [], []
    for u in range(p.num_users):
        c = user_comm[u]
        mean = p.mean_degree * p.degree_ratio ** c
        # Pareto with the given shape, scaled to the community's mean
        xm = mean * (p.degree_skew - 1) / p.degree_skew
        deg = int(np.clip(xm * (1 + rng.pareto(p.degree_skew)), p.min_degree, p.num_items // 2))
        n_in = int((rng.random(deg) < p.in_community).sum())
        pick_in = np.minimum(np.searchsorted(comm_cdf[c], rng.random(n_in)), len(comm_items[c]) - 1)
        pick_all = np.minimum(np.searchsorted(all_cdf, rng.random(deg - n_in)), p.num_items - 1)
        chosen = np.unique(np.concatenate([comm_items[c][pick_in], pick_all]))
        users.append(np.full(len(chosen), u))
        items.append(chosen)
    return np.concatenate(users), np.concatenate(items)


@DATASETS.register("synthetic_bipartite", params=SyntheticBipartiteParams, task="ranking")
def load_synthetic_bipartite(p: SyntheticBipartiteParams, env: DataEnv) -> GraphDataset:
    seed = env.seed if p.seed is None else p.seed
    u, i = generate(p, seed)
    return build_ranking_dataset("synthetic_bipartite", densify(u, i), p, "generated", {"generator_seed": seed})
