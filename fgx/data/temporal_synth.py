"""Generated timestamped graph (offline) for temporal link prediction (``task=link_temporal``,
docs/link_prediction.md), usable for node classification too (``y``: the community).

Each node has a latent position in ``latent_dim`` dimensions, drawn around the centroid of its community
(``communities`` of them); its features are a fixed random linear map of the position plus Gaussian
noise (``noise``). Pairs arrive over ``steps`` time steps, ``edges_per_step`` new ones each
(``edge_time``: the step): a new pair closes a triangle of the graph so far (a random edge (u, w) and a
neighbour v of w, with probability ``triadic``), or else joins a random node u to one of 64 random
candidates v, chosen with weight exp(-|pos_u - pos_v|² / 2): near nodes link. Future pairs are
thus predictable from the past graph (triadic closure) and from the features (latent proximity), as in
the co-authorship and check-in graphs temporal link prediction is studied on."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from fgx.config import spec
from fgx.data.base import DataEnv, DatasetInfo, GraphDataset, random_split
from fgx.registry import DATASETS


@dataclass
class TemporalSynthParams:
    num_nodes: int = field(default=1000, metadata=spec(min=10))
    communities: int = field(default=5, metadata=spec(min=1))
    latent_dim: int = field(default=4, metadata=spec(min=1))
    spread: float = field(default=0.5, metadata=spec(min=0.0, help="scale of the community centroids (positions: N(centroid, 1))"))
    num_features: int = field(default=32, metadata=spec(min=1))
    noise: float = field(default=0.5, metadata=spec(min=0.0, help="std of the Gaussian noise added to the features"))
    steps: int = field(default=10, metadata=spec(min=3, help="time steps (the temporal split needs 3)"))
    edges_per_step: int = field(default=500, metadata=spec(min=1))
    triadic: float = field(default=0.5, metadata=spec(min=0.0, max=1.0, help="share of new pairs closing a triangle"))
    train: float = field(default=0.2, metadata=spec(gt=0.0, max=1.0, help="node split (node task)"))
    val: float = field(default=0.4, metadata=spec(min=0.0, max=1.0))
    graph_seed: int | None = field(default=None, metadata=spec(help="seed of the graph; null: the run's"))


def generate(p: TemporalSynthParams, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(features [n, f], community [n], pairs [E, 2], step [E]) with distinct pairs."""
    rng = np.random.default_rng(seed)
    n = p.num_nodes
    comm = rng.integers(p.communities, size=n)
    centroids = rng.normal(0.0, p.spread, size=(p.communities, p.latent_dim))
    pos = centroids[comm] + rng.normal(0.0, 1.0, size=(n, p.latent_dim))
    x = pos @ rng.normal(0.0, 1.0, size=(p.latent_dim, p.num_features)) + rng.normal(0.0, p.noise, size=(n, p.num_features))
    adj: list[set] = [set() for _ in range(n)]
    pairs, steps = [], []
    for t in range(p.steps):
        added, tries = 0, 0
        while added < p.edges_per_step and tries < 50 * p.edges_per_step:
            tries += 1
            if pairs and rng.random() < p.triadic:
                u, w = pairs[rng.integers(len(pairs))][:: 1 if rng.random() < 0.5 else -1]
                v = rng.choice(list(adj[w]))
            else:
                u = int(rng.integers(n))
                cand = rng.integers(n, size=64)
                w8 = np.exp(-0.5 * ((pos[cand] - pos[u]) ** 2).sum(1))
                v = int(cand[rng.choice(64, p=w8 / w8.sum())]) if w8.sum() > 0 else int(cand[0])
            u, v = int(u), int(v)
            if u == v or v in adj[u]:
                continue
            adj[u].add(v)
            adj[v].add(u)
            pairs.append((u, v))
            steps.append(t)
            added += 1
    return x, comm, np.array(pairs, dtype=np.int64).reshape(-1, 2), np.array(steps, dtype=np.int64)


@DATASETS.register("temporal_synth", params=TemporalSynthParams, task="node", provides=("edge_time",))
def load_temporal_synth(p: TemporalSynthParams, env: DataEnv) -> GraphDataset:
    from torch_geometric.data import Data

    seed = env.seed if p.graph_seed is None else p.graph_seed
    x, comm, pairs, steps = generate(p, seed)
    e = torch.from_numpy(pairs).t()
    data = Data(x=torch.from_numpy(x).float(), edge_index=torch.cat([e, e.flip(0)], 1), num_nodes=p.num_nodes)
    data.edge_time = torch.from_numpy(np.concatenate([steps, steps]))
    data.y = torch.from_numpy(comm)
    data.train_mask, data.val_mask, data.test_mask = random_split(p.num_nodes, p.train, p.val, seed)
    info = DatasetInfo(name="temporal_synth", task="node", num_classes=p.communities, main_metric="accuracy",
                       source="generated", extra={"steps": p.steps, "pairs": int(pairs.shape[0])})
    return GraphDataset(data, info)
