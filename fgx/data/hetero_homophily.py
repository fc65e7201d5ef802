"""Homophily-heterogeneous graph (generated offline): ``num_communities`` communities, each an
SBM-like block with its own edge homophily (evenly spread over [homophily_min, homophily_max]),
joined by a few random cross-community edges. Class-conditional Gaussian features share their
class means across communities, so clients differ in structure (homophily), not in the
feature-label map. ``data.community`` feeds ``partitioner=by_community`` (one client each)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from fgx.config import ConfigError, spec
from fgx.data.base import DataEnv, DatasetInfo, GraphDataset, random_split
from fgx.registry import DATASETS


@dataclass
class HeteroHomophilyParams:
    num_communities: int = field(default=10, metadata=spec(min=1))
    nodes_per_community: int = field(default=300, metadata=spec(min=10))
    num_classes: int = field(default=5, metadata=spec(min=2))
    num_features: int = field(default=32, metadata=spec(min=1))
    avg_degree: float = field(default=8.0, metadata=spec(gt=0.0))
    homophily_min: float = field(default=0.1, metadata=spec(min=0.0, max=1.0))
    homophily_max: float = field(default=0.9, metadata=spec(min=0.0, max=1.0))
    cross_edge_fraction: float = field(default=0.02, metadata=spec(min=0.0, max=1.0))
    feature_signal: float = field(default=0.5, metadata=spec(min=0.0, help="class-mean separation / noise std"))
    train: float = field(default=0.2, metadata=spec(gt=0.0, max=1.0))
    val: float = field(default=0.4, metadata=spec(min=0.0, max=1.0))
    graph_seed: int | None = None   # None: the run's seed

    def validate(self, prefix: str) -> None:
        if self.homophily_min > self.homophily_max:
            raise ConfigError(f"{prefix}.homophily_min", self.homophily_min,
                              f"<= homophily_max={self.homophily_max}")


def community_levels(p: HeteroHomophilyParams) -> np.ndarray:
    return np.linspace(p.homophily_min, p.homophily_max, p.num_communities)


def hetero_homophily_graph(p: HeteroHomophilyParams, seed: int):
    from torch_geometric.data import Data
    from torch_geometric.utils import coalesce, to_undirected

    rng = np.random.default_rng(seed)
    c, f, nc = p.num_classes, p.num_features, p.nodes_per_community
    n = p.num_communities * nc
    y = rng.integers(0, c, size=n)
    community = np.repeat(np.arange(p.num_communities), nc)
    means = rng.normal(0, 1, size=(c, f)) * p.feature_signal
    x = means[y] + rng.normal(0, 1, size=(n, f))
    src_all, dst_all = [], []
    m_per = int(nc * p.avg_degree / 2)
    for k, h in enumerate(community_levels(p)):
        base = k * nc
        yk = y[base:base + nc]
        src = rng.integers(0, nc, size=m_per)
        same = rng.random(m_per) < h
        dst = np.empty(m_per, dtype=np.int64)
        for cls in range(c):
            in_cls, out_cls = np.flatnonzero(yk == cls), np.flatnonzero(yk != cls)
            sel = same & (yk[src] == cls)
            if in_cls.size:
                dst[sel] = rng.choice(in_cls, size=int(sel.sum()))
            else:
                dst[sel] = src[sel]
            sel = (~same) & (yk[src] == cls)
            dst[sel] = rng.choice(out_cls, size=int(sel.sum())) if out_cls.size else src[sel]
        src_all.append(base + src)
        dst_all.append(base + dst)
    m_cross = int(p.cross_edge_fraction * m_per * p.num_communities)
    src_all.append(rng.integers(0, n, size=m_cross))
    dst_all.append(rng.integers(0, n, size=m_cross))
    src, dst = np.concatenate(src_all), np.concatenate(dst_all)
    keep = src != dst
    ei = torch.from_numpy(np.stack([src[keep], dst[keep]])).long()
    ei = coalesce(to_undirected(ei, num_nodes=n), num_nodes=n)
    return Data(x=torch.from_numpy(x).float(), edge_index=ei, y=torch.from_numpy(y).long(),
                community=torch.from_numpy(community).long(), num_nodes=n)


@DATASETS.register("hetero_homophily", params=HeteroHomophilyParams, task="node", provides=("community",))
def load_hetero_homophily(p: HeteroHomophilyParams, env: DataEnv) -> GraphDataset:
    gseed = env.seed if p.graph_seed is None else p.graph_seed
    data = hetero_homophily_graph(p, gseed)
    data.train_mask, data.val_mask, data.test_mask = random_split(data.num_nodes, p.train, p.val, env.seed)
    info = DatasetInfo(name="hetero_homophily", task="node", num_classes=p.num_classes, main_metric="accuracy",
                       source="generated", extra={"graph_seed": gseed, "homophily_min": p.homophily_min,
                                                  "homophily_max": p.homophily_max})
    return GraphDataset(data, info)
