"""Zachary's karate club (networkx's copy: no download), two factions as labels."""
from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx
import torch

from fgx.config import spec
from fgx.data.base import DataEnv, DatasetInfo, GraphDataset, random_split
from fgx.registry import DATASETS


@dataclass
class KarateParams:
    train: float = field(default=0.4, metadata=spec(gt=0.0, max=1.0))
    val: float = field(default=0.2, metadata=spec(min=0.0, max=1.0))


@DATASETS.register("karate", params=KarateParams, task="node")
def load_karate(p: KarateParams, env: DataEnv) -> GraphDataset:
    from torch_geometric.data import Data
    from torch_geometric.utils import from_networkx

    g = nx.karate_club_graph()
    y = torch.tensor([0 if g.nodes[v]["club"] == "Mr. Hi" else 1 for v in g.nodes])
    pyg = from_networkx(g)
    data = Data(x=torch.eye(g.number_of_nodes()), edge_index=pyg.edge_index, y=y, num_nodes=g.number_of_nodes())
    data.train_mask, data.val_mask, data.test_mask = random_split(data.num_nodes, p.train, p.val, env.seed)
    info = DatasetInfo(name="karate", task="node", num_classes=2, main_metric="accuracy", source="real",
                       extra={"origin": "networkx.karate_club_graph"})
    return GraphDataset(data, info)
