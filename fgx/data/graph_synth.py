"""Generated graph collection for the ``graph`` task (offline; tests and quick runs).

Each graph is an Erdős–Rényi graph (networkx) whose edge density is set by its class: class c has
edge probability ``density * (1 + c)``, sizes are uniform in [min_nodes, max_nodes] whatever the
class, and node features are a constant column plus Gaussian noise, so the label is in the structure
only. ``groups`` > 1 splits the graphs into groups (``graph_source``) whose label rule is rotated
(group s labels a class-c graph (c + s) mod K): clients of different groups need different models,
which is the setting GCFL's clustering is for (``partitioner=cross_dataset`` gives each client one
group)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from fgx.config import spec
from fgx.data.base import DataEnv, DatasetInfo, GraphDataset
from fgx.data.graphs import check_collection, collection
from fgx.registry import DATASETS


@dataclass
class GraphSynthParams:
    num_graphs: int = field(default=200, metadata=spec(min=4))
    num_classes: int = field(default=2, metadata=spec(min=2))
    min_nodes: int = field(default=8, metadata=spec(min=2))
    max_nodes: int = field(default=24, metadata=spec(min=2))
    density: float = field(default=0.1, metadata=spec(gt=0.0, max=1.0, help="edge probability of class 0"))
    num_features: int = field(default=4, metadata=spec(min=1, help="a constant column plus num_features-1 noise ones"))
    groups: int = field(default=1, metadata=spec(min=1, help="groups with rotated label rules (graph_source)"))
    train: float = field(default=0.6, metadata=spec(gt=0.0, max=1.0))
    val: float = field(default=0.2, metadata=spec(min=0.0, max=1.0))
    graph_seed: int | None = field(default=None, metadata=spec(help="seed of the graphs and split; null: the run's"))

    def validate(self, prefix: str) -> None:
        from fgx.config import ConfigError

        if self.max_nodes < self.min_nodes:
            raise ConfigError(f"{prefix}.max_nodes", self.max_nodes, f">= min_nodes ({self.min_nodes})")
        if self.density * self.num_classes > 1:
            raise ConfigError(f"{prefix}.density", self.density,
                              f"<= {1 / self.num_classes:g} (class K-1 has edge probability density * K)")
        if self.train + self.val >= 1:
            raise ConfigError(f"{prefix}.val", self.val, f"< {1 - self.train:g} (train + val must leave test graphs)")


@DATASETS.register("graph_synth", params=GraphSynthParams, task="graph")
def load_graph_synth(p: GraphSynthParams, env: DataEnv) -> GraphDataset:
    import networkx as nx
    from torch_geometric.data import Data
    from torch_geometric.utils import from_networkx, to_undirected

    seed = env.seed if p.graph_seed is None else p.graph_seed
    rng = np.random.default_rng(seed)
    graphs, labels, source = [], [], []
    for i in range(p.num_graphs):
        c = int(rng.integers(p.num_classes))
        s = i * p.groups // p.num_graphs
        n = int(rng.integers(p.min_nodes, p.max_nodes + 1))
        g = nx.gnp_random_graph(n, p.density * (1 + c), seed=int(rng.integers(2**31)))
        ei = from_networkx(g).edge_index if g.number_of_edges() else torch.empty(2, 0, dtype=torch.long)
        x = np.concatenate([np.ones((n, 1)), rng.normal(0, 1, size=(n, p.num_features - 1))], 1)
        graphs.append(Data(x=torch.from_numpy(x).float(), edge_index=to_undirected(ei, num_nodes=n), num_nodes=n))
        labels.append((c + s) % p.num_classes)
        source.append(s)
    data = collection(graphs, torch.tensor(labels), (p.train, p.val), seed, torch.tensor(source))
    check_collection(data, p.num_classes, "graph_synth")
    info = DatasetInfo(name="graph_synth", task="graph", num_classes=p.num_classes, main_metric="accuracy",
                       source="generated", extra={"graphs": p.num_graphs, "groups": p.groups})
    return GraphDataset(data, info)
