"""Louvain communities (networkx) packed into clients, the FedSage+/FED-PUB/OpenFGL recipe:

1. Louvain communities of the whole graph (networkx, `resolution`, the run's seed);
2. a community larger than ``num_nodes // num_clients - delta`` nodes is cut into pieces of at most
   that size (OpenFGL's ``louvain_delta``, default 20 as there), so that no single community can fill
   one client while others are left with a few isolated nodes;
3. pieces are assigned largest first to the currently smallest client.

With the size cap every client ends up within one piece of the mean size, so none is left without
training nodes (a generated graph with a few large class blocks and isolated nodes otherwise gave
some clients only singletons). ``delta: null`` turns the cap off (communities are kept whole).

fgx decision: OpenFGL cuts a large community in its node-id order; fgx cuts it in breadth-first order
from its lowest node id, so pieces are neighbourhoods rather than scattered ids.
"""
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
    delta: int | None = field(default=20, metadata=spec(
        min=0, help="communities above num_nodes // num_clients - delta nodes are cut (OpenFGL's louvain_delta); "
                    "null keeps communities whole"))


def _bfs_order(g: nx.Graph, nodes: list[int]) -> list[int]:
    """The community's nodes in breadth-first order (each connected part from its lowest id)."""
    sub = g.subgraph(nodes)
    order, seen = [], set()
    for start in nodes:                      # sorted ascending
        if start in seen:
            continue
        for u in [start] + [v for _, v in nx.bfs_edges(sub, start, sort_neighbors=sorted)]:
            seen.add(u)
            order.append(u)
    return order


def cap_communities(g: nx.Graph, communities: list[list[int]], cap: int) -> list[list[int]]:
    """Cut every community larger than `cap` into pieces of at most `cap` nodes (breadth-first)."""
    out = []
    for comm in communities:
        if len(comm) <= cap:
            out.append(comm)
            continue
        order = _bfs_order(g, comm)
        out += [sorted(order[i:i + cap]) for i in range(0, len(order), cap)]
    return out


@PARTITIONERS.register("louvain", params=LouvainParams, tasks=("node", "edge", "link"))
def louvain_partition(p: LouvainParams, data, info, seed: int) -> list[torch.Tensor]:
    check_num_clients(p.num_clients, data.num_nodes)
    g = nx.Graph()
    g.add_nodes_from(range(data.num_nodes))
    g.add_edges_from(data.edge_index.t().tolist())
    communities = [sorted(c) for c in nx.community.louvain_communities(g, resolution=p.resolution, seed=seed)]
    if p.delta is not None:
        communities = cap_communities(g, communities, max(1, data.num_nodes // p.num_clients - p.delta))
    communities = sorted(communities, key=lambda c: (-len(c), c[0]))
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
