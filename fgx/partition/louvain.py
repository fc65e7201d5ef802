"""Louvain communities (networkx) packed into clients, the FedSage+/FED-PUB recipe: communities
are assigned largest first to the currently smallest client, so client sizes stay balanced."""
from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx
import torch

from fgx.config import spec
from fgx.data.base import DataError
from fgx.partition.base import check_num_clients
from fgx.registry import PARTITIONERS


@dataclass
class LouvainParams:
    num_clients: int = field(default=10, metadata=spec(min=1))
    resolution: float = field(default=1.0, metadata=spec(gt=0.0))


@PARTITIONERS.register("louvain", params=LouvainParams, tasks=("node", "edge"))
def louvain_partition(p: LouvainParams, data, info, seed: int) -> list[torch.Tensor]:
    check_num_clients(p.num_clients, data.num_nodes)
    g = nx.Graph()
    g.add_nodes_from(range(data.num_nodes))
    g.add_edges_from(data.edge_index.t().tolist())
    communities = nx.community.louvain_communities(g, resolution=p.resolution, seed=seed)
    communities = sorted((sorted(c) for c in communities), key=lambda c: (-len(c), c[0]))
    # fewer communities than clients: halve the largest until every client can get one
    while len(communities) < p.num_clients:
        big = communities.pop(0)
        if len(big) < 2:
            raise DataError(f"louvain: cannot make {p.num_clients} clients from {data.num_nodes} nodes")
        half = len(big) // 2
        communities = sorted(communities + [big[:half], big[half:]], key=lambda c: (-len(c), c[0]))
    parts: list[list[int]] = [[] for _ in range(p.num_clients)]
    for comm in communities:
        smallest = min(range(p.num_clients), key=lambda i: (len(parts[i]), i))
        parts[smallest].extend(comm)
    return [torch.tensor(sorted(x), dtype=torch.long) for x in parts]
