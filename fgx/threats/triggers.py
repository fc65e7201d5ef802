"""Backdoor triggers on graphs: what a trigger is and how it is put into a graph (fgx/threats/backdoor.py
uses these on clients' data and on the test items it scores).

- Graph level (Zhang et al. 2021, "Backdoor attacks to graph neural networks", the subgraph trigger Xu et
  al. 2022 use in federated GNNs): the trigger is an Erdős–Rényi graph on ``size`` positions; it is put
  into a graph by choosing ``size`` of its nodes at random, removing every edge among them and adding the
  trigger's edges between them (subgraph replacement; node features are left as they are).
- Distributed (Xu et al. 2022, after Xie et al. 2020's DBA on images): the global trigger's edges are split
  into disjoint local triggers on the same positions, one per malicious client; together they are the
  global trigger.

The node-level trigger (a subgraph hung off a target node) is in fgx/threats/node_backdoor.py."""
from __future__ import annotations

import torch

from fgx.data.base import DataError


def er_trigger(size: int, density: float, gen: torch.Generator) -> torch.Tensor:
    """[2, m] the pairs (i < j) of an Erdős–Rényi G(size, density) graph on positions 0..size-1, drawn until
    it has at least one edge (an empty trigger would put nothing into a graph)."""
    if size < 2:
        raise ValueError(f"a trigger needs at least 2 nodes (size={size})")
    iu = torch.triu_indices(size, size, offset=1)
    for _ in range(1000):
        keep = torch.rand(iu.size(1), generator=gen) < density
        if bool(keep.any()):
            return iu[:, keep]
    raise ValueError(f"an Erdős–Rényi trigger of {size} nodes at density {density} drew no edge in 1000 tries")


def split_trigger(edges: torch.Tensor, parts: int, gen: torch.Generator) -> list[torch.Tensor]:
    """The global trigger's edges dealt at random into ``parts`` disjoint, non-empty local triggers (DBA)
    whose union is the global trigger."""
    m = edges.size(1)
    if parts < 1 or m < parts:
        raise DataError(f"the distributed backdoor splits its global trigger's {m} edges among {parts} malicious "
                        f"clients: each needs at least one (raise threat.trigger_size or threat.density, or "
                        f"lower threat.fraction)")
    order = torch.randperm(m, generator=gen)
    return [edges[:, order[k::parts]] for k in range(parts)]


def graph_offsets(graph: torch.Tensor, num_graphs: int) -> torch.Tensor:
    """[G + 1] offsets of contiguous graphs: graph g owns nodes ptr[g]..ptr[g+1]-1."""
    counts = torch.bincount(graph, minlength=num_graphs)
    return torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)])


def embed_in_graphs(edge_index: torch.Tensor, ptr: torch.Tensor, gids: list[int], trigger: torch.Tensor,
                    size: int, gen: torch.Generator) -> torch.Tensor:
    """``edge_index`` with ``trigger`` (pairs over positions 0..size-1) put into each graph of ``gids`` by
    subgraph replacement: ``size`` of the graph's nodes drawn at random, the edges among them removed, the
    trigger's edges (both directions) added. Every graph of ``gids`` must have at least ``size`` nodes."""
    from torch_geometric.utils import coalesce

    n = int(ptr[-1])
    pos = torch.full((n,), -1, dtype=torch.long)
    drop = torch.zeros(edge_index.size(1), dtype=torch.bool)
    added = []
    for g in gids:
        lo, hi = int(ptr[g]), int(ptr[g + 1])
        if hi - lo < size:
            raise ValueError(f"graph {g} has {hi - lo} nodes, fewer than the trigger's {size}")
        chosen = lo + torch.randperm(hi - lo, generator=gen)[:size]
        pos[chosen] = torch.arange(size)
        drop |= (pos[edge_index[0]] >= 0) & (pos[edge_index[1]] >= 0)
        pairs = chosen[trigger]
        added.append(torch.cat([pairs, pairs.flip(0)], 1))
        pos[chosen] = -1
    out = torch.cat([edge_index[:, ~drop], *added], 1) if added else edge_index
    return coalesce(out, num_nodes=n)
