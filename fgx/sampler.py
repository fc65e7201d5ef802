"""fgx's own CSR neighbour sampler.

PyG's NeighborLoader/LinkNeighborLoader need pyg-lib or torch-sparse, which have no plain CPU
wheels, so fgx samples with vectorised torch ops instead: per hop, each frontier node keeps at most
``fanout`` of its edges, chosen uniformly without replacement (random keys sorted per node; hubs
draw positions instead of listing their edges). The sampled edges come in hop order (seeds, then
the edges picked at hop 1, 2, ...), so a model can run its last layers on a prefix of them.

Seeds are nodes or edges (an edge seeds its two endpoints and is always in the subgraph). Nodes in
``stop_at`` (e.g. another client's nodes) enter the subgraph but are never expanded."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Sample:
    nodes: torch.Tensor        # global node ids; seed nodes (or seed-edge endpoints) first
    edge_ids: torch.Tensor     # ids into the sampler's edge_index; seed edges first
    edge_index: torch.Tensor   # [2, len(edge_ids)] in local node indices
    num_seed_edges: int        # the first ``num_seed_edges`` edges are the seeds (0 for node seeds)
    num_seed_nodes: int        # the first ``num_seed_nodes`` nodes are the seeds / seed endpoints
    hop: torch.Tensor          # hop at which each node was reached (0 for seeds)
    edge_hop_end: list | None = None   # edges are in hop order; [:edge_hop_end[h]] = those picked at hops <= h

    @property
    def seed_edge_mask(self) -> torch.Tensor:
        m = torch.zeros(self.edge_ids.numel(), dtype=torch.bool)
        m[: self.num_seed_edges] = True
        return m


class NeighborSampler:
    """``direction="in"``: a node's neighbours are the sources of its incoming edges (messages
    flow along the edges, as in PyG); ``"both"``: in- and out-edges."""

    def __init__(self, edge_index: torch.Tensor, num_nodes: int, fanouts: list[int], direction: str = "in",
                 stop_at: torch.Tensor | None = None):
        if direction not in ("in", "both"):
            raise ValueError(f"direction must be 'in' or 'both', got {direction!r}")
        if any(k == 0 or k < -1 for k in fanouts):
            raise ValueError(f"fanouts must be positive or -1 (all neighbours), got {fanouts}")
        self.edge_index = edge_index
        self.num_nodes = num_nodes
        self.fanouts = list(fanouts)
        e = edge_index.size(1)
        eid = torch.arange(e)
        center, other = edge_index[1], edge_index[0]
        if direction == "both":
            center = torch.cat([center, edge_index[0]])
            other = torch.cat([other, edge_index[1]])
            eid = torch.cat([eid, eid])
        order = torch.argsort(center, stable=True)
        self.col = other[order]
        self.eid = eid[order]
        self.rowptr = torch.zeros(num_nodes + 1, dtype=torch.long)
        self.rowptr[1:] = torch.cumsum(torch.bincount(center, minlength=num_nodes), 0)
        self.stop = torch.zeros(num_nodes, dtype=torch.bool)
        if stop_at is not None:
            self.stop[stop_at] = True
        self._local = torch.full((num_nodes,), -1, dtype=torch.long)   # reused global->local map

    def sample_nodes(self, seeds: torch.Tensor, generator: torch.Generator | None = None) -> Sample:
        return self._sample(torch.unique(seeds.long()), torch.empty(0, dtype=torch.long), generator)

    def sample_edges(self, seed_edges: torch.Tensor, generator: torch.Generator | None = None) -> Sample:
        seed_edges = seed_edges.long()
        ends = self.edge_index[:, seed_edges].reshape(-1)
        # first-occurrence order of the endpoints, deduplicated
        uniq, inv = torch.unique(ends, return_inverse=True)
        first = torch.full((uniq.numel(),), ends.numel(), dtype=torch.long).scatter_reduce(
            0, inv, torch.arange(ends.numel()), reduce="amin")
        seeds = uniq[torch.argsort(first)]
        return self._sample(seeds, seed_edges, generator)

    def in_edges(self, fanout: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """Ids of at most ``fanout`` in-edges of every node (-1: all), the same uniform draw per node as a
        sampled hop: the edge set of one layer of layer-wise inference (fgx.inference)."""
        if fanout < 0:
            return torch.arange(self.edge_index.size(1))
        return torch.unique(self.eid[self._pick(torch.arange(self.num_nodes), fanout, generator)])

    def _pick(self, frontier: torch.Tensor, fanout: int, generator) -> torch.Tensor:
        """Positions into col/eid: up to ``fanout`` per frontier node, uniformly without replacement.
        Nodes with at most ``HUB * fanout`` edges shuffle their edge list (random keys sorted within each
        node's segment); a hub (AML accounts with tens of thousands of transactions) draws 2 * fanout
        positions with replacement and keeps the first ``fanout`` distinct ones, a uniform sample
        without replacement that never enumerates its edge list."""
        start = self.rowptr[frontier]
        deg = self.rowptr[frontier + 1] - start
        if frontier.numel() == 0 or int(deg.sum()) == 0:
            return torch.empty(0, dtype=torch.long)
        if fanout < 0 or int(deg.max()) <= fanout:
            return self._all(start, deg)
        hub = deg > self.HUB * fanout
        parts = []
        if bool((~hub).any()):
            parts.append(self._shuffled(start[~hub], deg[~hub], fanout, generator))
        if bool(hub.any()):
            got, short = self._draw(start[hub], deg[hub], fanout, generator)
            parts.append(got)
            if short.numel():          # rare: fewer than fanout distinct draws; shuffle those hubs' lists
                parts.append(self._shuffled(start[hub][short], deg[hub][short], fanout, generator))
        return torch.cat(parts)

    HUB = 4

    @staticmethod
    def _all(start: torch.Tensor, deg: torch.Tensor) -> torch.Tensor:
        total = int(deg.sum())
        seg = torch.repeat_interleave(torch.arange(deg.numel()), deg)
        seg_start = torch.cumsum(deg, 0) - deg
        return start[seg] + torch.arange(total) - seg_start[seg]

    def _shuffled(self, start: torch.Tensor, deg: torch.Tensor, fanout: int, generator) -> torch.Tensor:
        total = int(deg.sum())
        if total == 0:
            return torch.empty(0, dtype=torch.long)
        seg = torch.repeat_interleave(torch.arange(deg.numel()), deg)
        seg_start = torch.cumsum(deg, 0) - deg
        pos = start[seg] + torch.arange(total) - seg_start[seg]
        keys = torch.rand(total, generator=generator, dtype=torch.float64) + seg.double()
        order = torch.argsort(keys)               # segments stay contiguous, shuffled within
        rank = torch.arange(total) - seg_start[seg[order]]
        return pos[order[rank < fanout]]

    @staticmethod
    def _draw(start: torch.Tensor, deg: torch.Tensor, fanout: int, generator):
        """First ``fanout`` distinct of 2 * fanout uniform draws per node; also the nodes that got fewer."""
        n, m = deg.numel(), 2 * fanout
        offs = (torch.rand(n, m, generator=generator, dtype=torch.float64) * deg.unsqueeze(1).double()).long()
        offs = torch.minimum(offs, deg.unsqueeze(1) - 1)
        # a draw is kept if no earlier draw of the same node hit the same offset
        srt, order = torch.sort(offs, dim=1, stable=True)
        dup_sorted = torch.zeros_like(srt, dtype=torch.bool)
        dup_sorted[:, 1:] = srt[:, 1:] == srt[:, :-1]
        dup = torch.zeros_like(dup_sorted).scatter_(1, order, dup_sorted)
        keep = ~dup & (torch.cumsum((~dup).long(), 1) <= fanout)
        short = (keep.sum(1) < fanout).nonzero().view(-1)
        ok = torch.ones(n, dtype=torch.bool)
        ok[short] = False
        keep &= ok.unsqueeze(1)
        return (start.unsqueeze(1) + offs)[keep], short

    def _sample(self, seeds: torch.Tensor, seed_edges: torch.Tensor, generator) -> Sample:
        local = self._local
        nodes = [seeds]
        hops = [torch.zeros(seeds.numel(), dtype=torch.long)]
        local[seeds] = torch.arange(seeds.numel())
        n = seeds.numel()
        edge_parts = [seed_edges]
        frontier = seeds[~self.stop[seeds]]
        for h, k in enumerate(self.fanouts, start=1):
            if frontier.numel() == 0:
                break
            pos = self._pick(frontier, k, generator)
            edge_parts.append(self.eid[pos])
            nbr = torch.unique(self.col[pos])
            new = nbr[local[nbr] < 0]
            local[new] = n + torch.arange(new.numel())
            n += new.numel()
            nodes.append(new)
            hops.append(torch.full((new.numel(),), h, dtype=torch.long))
            frontier = new[~self.stop[new]]
        all_nodes = torch.cat(nodes)
        # edges in hop order (seeds, then those picked at hop 1, 2, ...), each once, at its first hop
        picked = torch.cat(edge_parts)
        hop_of = torch.cat([torch.full((part.numel(),), h, dtype=torch.long) for h, part in enumerate(edge_parts)])
        uniq, inv = torch.unique(picked, return_inverse=True)
        first = torch.full((uniq.numel(),), picked.numel(), dtype=torch.long).scatter_reduce(
            0, inv, torch.arange(picked.numel()), reduce="amin")
        keep = torch.zeros(picked.numel(), dtype=torch.bool)
        keep[first] = True
        keep[: seed_edges.numel()] = True
        edge_ids, edge_hop = picked[keep], hop_of[keep]
        ends = torch.cumsum(torch.bincount(edge_hop, minlength=len(edge_parts)), 0).tolist()
        ei = local[self.edge_index[:, edge_ids]]
        local[all_nodes] = -1
        return Sample(all_nodes, edge_ids, ei, int(seed_edges.numel()), int(seeds.numel()), torch.cat(hops), ends)


def sample_view(view, sample: Sample):
    """The sampled subgraph of an edge- or node-task view as a PyG Data (edge attributes, labels and
    masks carried over; ``seed_edge_mask`` marks the seeds for ego IDs and the loss)."""
    from torch_geometric.data import Data

    sub = Data(x=view.x[sample.nodes], edge_index=sample.edge_index, num_nodes=sample.nodes.numel())
    for k in ("edge_attr", "edge_y", "edge_train_mask", "edge_val_mask", "edge_test_mask", "is_cross"):
        v = getattr(view, k, None)
        if v is not None:
            setattr(sub, k, v[sample.edge_ids])
    for k in ("y", "train_mask", "val_mask", "test_mask"):
        v = getattr(view, k, None)
        if v is not None and v.size(0) == view.num_nodes:
            setattr(sub, k, v[sample.nodes])
    sub.seed_edge_mask = sample.seed_edge_mask
    sub.edge_hop_end = sample.edge_hop_end
    sub.global_node = sample.nodes
    sub.global_edge = sample.edge_ids
    return sub
