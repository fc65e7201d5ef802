"""Topology skew over a graph collection: graphs sorted by size (nodes) or by mean degree, then cut
into ``num_clients`` contiguous runs, so client 0 holds the smallest (sparsest) graphs and the last
client the largest (densest). ``mix`` hands that share of each client's graphs out at random first,
which softens the skew (0: fully sorted; 1: the random partition)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fgx.config import spec
from fgx.registry import PARTITIONERS


@dataclass
class SizeSkewParams:
    num_clients: int = field(default=10, metadata=spec(min=1))
    key: str = field(default="nodes", metadata=spec(choices=["nodes", "degree"], help="sort by graph size or mean degree"))
    mix: float = field(default=0.0, metadata=spec(min=0.0, max=1.0, help="share of graphs placed at random"))


@PARTITIONERS.register("size_skew", params=SizeSkewParams, tasks=("graph",))
def size_skew_partition(p: SizeSkewParams, data, info, seed: int) -> list[torch.Tensor]:
    from fgx.data.graphs import check_num_clients, nodes_of_graphs

    check_num_clients(p.num_clients, data)
    G = int(data.graph_y.numel())
    sizes = torch.bincount(data.graph, minlength=G).double()
    value = sizes if p.key == "nodes" else torch.bincount(data.graph[data.edge_index[0]], minlength=G) / sizes.clamp(min=1)
    g = torch.Generator().manual_seed(seed * 7919 + 104729)
    tie = torch.rand(G, generator=g, dtype=torch.double) * 1e-6      # random order among equal keys
    order = torch.argsort(value + tie)
    owner = torch.empty(G, dtype=torch.long)
    for c, chunk in enumerate(torch.tensor_split(order, p.num_clients)):
        owner[chunk] = c
    mixed = torch.rand(G, generator=g) < p.mix
    owner[mixed] = torch.randint(p.num_clients, (int(mixed.sum()),), generator=g)
    return nodes_of_graphs(data, [(owner == c).nonzero().view(-1) for c in range(p.num_clients)])
