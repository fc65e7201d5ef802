"""Contextual stochastic block model: class-conditional Gaussian features on an SBM whose edge
homophily is set directly. Offline stand-in for citation graphs."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from fgx.config import spec
from fgx.data.base import DataEnv, DatasetInfo, GraphDataset, random_split
from fgx.registry import DATASETS


@dataclass
class CsbmParams:
    num_nodes: int = field(default=2000, metadata=spec(min=10))
    num_classes: int = field(default=5, metadata=spec(min=2))
    num_features: int = field(default=64, metadata=spec(min=1))
    avg_degree: float = field(default=8.0, metadata=spec(gt=0.0))
    homophily: float = field(default=0.8, metadata=spec(min=0.0, max=1.0))
    feature_signal: float = field(default=1.0, metadata=spec(min=0.0, help="class-mean separation / noise std"))
    train: float = field(default=0.2, metadata=spec(gt=0.0, max=1.0))
    val: float = field(default=0.4, metadata=spec(min=0.0, max=1.0))
    graph_seed: int | None = None   # None: the run's seed
    features_public: bool = field(default=False, metadata=spec(
        help="declare the node features public: lets methods whose messages carry raw or summed features "
             "(FedGCN, ce_fedgnn remote_layer0=raw) run; the channel refuses them otherwise"))


def csbm_graph(n: int, c: int, f: int, avg_degree: float, homophily: float, signal: float,
               seed: int):
    from torch_geometric.data import Data
    from torch_geometric.utils import coalesce, to_undirected

    rng = np.random.default_rng(seed)
    y = rng.integers(0, c, size=n)
    means = rng.normal(0, 1, size=(c, f)) * signal / np.sqrt(f) * 3
    x = means[y] + rng.normal(0, 1, size=(n, f)) / np.sqrt(f) * 3
    m = int(n * avg_degree / 2)
    # each edge: pick a source, then a same-class target with probability `homophily`
    src = rng.integers(0, n, size=m)
    same = rng.random(m) < homophily
    by_class = [np.flatnonzero(y == k) for k in range(c)]
    dst = np.empty(m, dtype=np.int64)
    for k in range(c):
        sel = same & (y[src] == k)
        if by_class[k].size:
            dst[sel] = rng.choice(by_class[k], size=int(sel.sum()))
        sel_other = (~same) & (y[src] == k)
        others = np.flatnonzero(y != k)
        dst[sel_other] = rng.choice(others, size=int(sel_other.sum()))
    keep = src != dst
    ei = torch.from_numpy(np.stack([src[keep], dst[keep]])).long()
    ei = coalesce(to_undirected(ei, num_nodes=n), num_nodes=n)
    return Data(x=torch.from_numpy(x).float(), edge_index=ei, y=torch.from_numpy(y).long(), num_nodes=n)


@DATASETS.register("csbm", params=CsbmParams, task="node")
def load_csbm(p: CsbmParams, env: DataEnv) -> GraphDataset:
    gseed = env.seed if p.graph_seed is None else p.graph_seed
    data = csbm_graph(p.num_nodes, p.num_classes, p.num_features, p.avg_degree, p.homophily,
                      p.feature_signal, gseed)
    data.train_mask, data.val_mask, data.test_mask = random_split(p.num_nodes, p.train, p.val, env.seed)
    info = DatasetInfo(name="csbm", task="node", num_classes=p.num_classes, main_metric="accuracy",
                       source="generated", extra={"graph_seed": gseed, "homophily": p.homophily},
                       features_public=p.features_public)
    return GraphDataset(data, info)
