"""Uniformly random node assignment (the papers' i.i.d. baseline partition); for the graph task, of
whole graphs (GCFL's single-dataset split)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fgx.config import spec
from fgx.partition.base import check_num_clients
from fgx.registry import PARTITIONERS


@dataclass
class RandomParams:
    num_clients: int = field(default=4, metadata=spec(min=1))


@PARTITIONERS.register("random", params=RandomParams, tasks=("node", "edge", "graph", "link"))
def random_partition(p: RandomParams, data, info, seed: int) -> list[torch.Tensor]:
    # salted: the dataset's split permutes with the bare seed, and reusing that stream would
    # hand one client all the training nodes
    g = torch.Generator().manual_seed(seed * 7919 + 104729)
    if info.task == "graph":
        from fgx.data.graphs import check_num_clients as check_graphs, nodes_of_graphs

        check_graphs(p.num_clients, data)
        perm = torch.randperm(int(data.graph_y.numel()), generator=g)
        return nodes_of_graphs(data, list(torch.tensor_split(perm, p.num_clients)))
    check_num_clients(p.num_clients, data.num_nodes)
    perm = torch.randperm(data.num_nodes, generator=g)
    return list(torch.tensor_split(perm, p.num_clients))
