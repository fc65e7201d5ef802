"""Client views of a partitioned graph.

A partitioner returns the global ids of each client's owned nodes. ``build_clients`` turns that
into :class:`ClientData`: the owned nodes, the halo (remote 1-hop neighbours), internal edges,
cross-client edges (held by both incident clients, with their attributes for edge tasks) and
statistics. Halo nodes appear with zero features and label -1: a client never holds a remote
node's raw features or labels."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from typing import Any

import torch

from fgx.data.base import DataError, DatasetInfo
from fgx.homophily import adjusted_homophily, edge_homophily, node_homophily

NODE_MASKS = ("train_mask", "val_mask", "test_mask")
EDGE_KEYS = ("edge_attr", "edge_y", "edge_train_mask", "edge_val_mask", "edge_test_mask")


@dataclass
class ClientData:
    cid: int
    nodes: torch.Tensor
    halo: torch.Tensor
    data: Any   # torch_geometric.data.Data
    num_owned: int
    stats: dict = field(default_factory=dict)

    @property
    def num_halo(self) -> int:
        return int(self.halo.numel())


def build_clients(data, info: DatasetInfo, client_nodes: list[torch.Tensor]) -> list[ClientData]:
    from torch_geometric.data import Data
    from torch_geometric.utils import is_undirected

    n = data.num_nodes
    if not client_nodes:
        raise DataError("the partitioner produced no clients")
    ei = data.edge_index
    undirected = info.task in ("node", "link") and is_undirected(ei, num_nodes=n)
    by_src, by_dst = _edges_by_node(ei[0], n), _edges_by_node(ei[1], n)
    # scratch arrays over all nodes, set for one client and reset after it: a client costs its own
    # nodes' edges, not a scan of the whole graph (1,000 clients of a million-node graph, #41)
    owned = torch.zeros(n, dtype=torch.bool)
    local = torch.full((n,), -1, dtype=torch.long)
    clients = []
    for cid, nodes in enumerate(client_nodes):
        nodes = torch.unique(nodes.long())
        if nodes.numel() == 0:
            raise DataError(f"client {cid} owns no nodes (more clients than the graph can fill?)")
        owned[nodes] = True
        touching = torch.unique(torch.cat([_incident(*by_src, nodes), _incident(*by_dst, nodes)]))  # sorted ids
        so, do = owned[ei[0, touching]], owned[ei[1, touching]]
        int_ids, cross_ids = touching[so & do], touching[so ^ do]
        remote = torch.where(owned[ei[0, cross_ids]], ei[1, cross_ids], ei[0, cross_ids])
        halo = torch.unique(remote)
        local[nodes] = torch.arange(nodes.numel())
        local[halo] = nodes.numel() + torch.arange(halo.numel())
        n_own, n_loc = nodes.numel(), nodes.numel() + halo.numel()

        cd = Data(num_nodes=n_loc)
        x = zeros_on_demand((n_loc,) + tuple(data.x.shape[1:]), data.x.dtype)
        x[:n_own] = data.x[nodes]
        cd.x = x
        if getattr(data, "y", None) is not None and data.y.numel() == n:
            y = torch.full((n_loc,) + tuple(data.y.shape[1:]), -1, dtype=data.y.dtype)
            y[:n_own] = data.y[nodes]
            cd.y = y
        for m in NODE_MASKS:
            if getattr(data, m, None) is not None:
                mask = torch.zeros(n_loc, dtype=torch.bool)
                mask[:n_own] = getattr(data, m)[nodes]
                setattr(cd, m, mask)
        cd.edge_index = local[ei[:, int_ids]]
        cd.cross_edge_index = local[ei[:, cross_ids]]
        owned[nodes] = False
        local[nodes] = -1
        local[halo] = -1
        cd.global_edge_id = int_ids
        cd.cross_global_edge_id = cross_ids
        for k in EDGE_KEYS:
            v = getattr(data, k, None)
            if v is not None:
                setattr(cd, k, v[int_ids])
                setattr(cd, "cross_" + k, v[cross_ids])
        cd.num_owned = n_own
        if info.task == "graph":     # whole graphs per client, renumbered locally (fgx/data/graphs.py)
            from fgx.data.graphs import attach_graphs
            attach_graphs(cd, data, nodes)
        c = ClientData(cid=cid, nodes=nodes, halo=halo, data=cd, num_owned=n_own)
        c.stats = client_stats(c, info, undirected)
        clients.append(c)
    return clients


# below this many bytes a tensor is plain torch.zeros (a mapping of its own would cost more than it saves)
ON_DEMAND_MIN_BYTES = 1 << 16


def zeros_on_demand(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """``torch.zeros(shape, dtype=dtype)`` whose pages take memory only once written: fresh anonymous
    pages (mmap), which the kernel backs with its shared zero page until a write. A client's halo rows
    are zeros that a method without cross-client edges (FedAvg's views) never writes, and a random
    graph's halo is several times the owned nodes: torch.zeros writes every byte (a memset), so those
    rows were resident, 575 MB of FedAvg's 2.9 GB heap peak at 1M nodes x 10 METIS clients (issue 69,
    scripts/profile_memory.py). Reads see zeros either way; a method that writes halo rows pays for the
    pages it writes, as before."""
    import mmap

    nbytes = torch.empty((), dtype=dtype).element_size() * math.prod(shape)
    if nbytes < ON_DEMAND_MIN_BYTES:
        return torch.zeros(shape, dtype=dtype)
    # torch.frombuffer keeps the mapping alive as long as the tensor; its memory is unmapped with it
    return torch.frombuffer(mmap.mmap(-1, nbytes), dtype=dtype).view(shape)


def _edges_by_node(end: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Edge ids sorted by one endpoint, and each node's range in them (a CSR of the edge list)."""
    # ptr as PyG's torch_geometric.index.index2ptr(end[order], n), counted from the unsorted ends
    order = torch.argsort(end, stable=True)
    ptr = torch.zeros(n + 1, dtype=torch.long)
    ptr[1:] = torch.cumsum(torch.bincount(end, minlength=n), 0)
    return order, ptr


def _incident(order: torch.Tensor, ptr: torch.Tensor, nodes: torch.Tensor) -> torch.Tensor:
    """The ids of the edges whose endpoint (the one ``order``/``ptr`` index) is in ``nodes``."""
    first, count = ptr[nodes], ptr[nodes + 1] - ptr[nodes]
    offset = torch.arange(int(count.sum())) - torch.repeat_interleave(torch.cumsum(count, 0) - count, count)
    return order[torch.repeat_interleave(first, count) + offset]


def client_stats(c: ClientData, info: DatasetInfo, undirected: bool) -> dict:
    d = c.data
    div = 2 if undirected else 1
    s = {
        "client": c.cid,
        "nodes": c.num_owned,
        "halo_nodes": c.num_halo,
        "internal_edges": int(d.edge_index.size(1)) // div,
        "cross_edges": int(d.cross_edge_index.size(1)) // div,
    }
    s["edges"] = s["internal_edges"] + s["cross_edges"]
    if info.task == "node" and getattr(d, "y", None) is not None:
        y = d.y[: c.num_owned]
        if info.num_classes > 0:
            s["label_counts"] = torch.bincount(y.clamp(min=0), minlength=info.num_classes).tolist()
            s["edge_homophily"] = edge_homophily(d.edge_index, d.y)
            s["node_homophily"] = node_homophily(d.edge_index, d.y)
            s["adjusted_homophily"] = adjusted_homophily(d.edge_index, d.y)
        for m in NODE_MASKS:
            if getattr(d, m, None) is not None:
                s[m.replace("_mask", "")] = int(getattr(d, m).sum())
    if info.task == "graph":
        from fgx.data.graphs import client_graph_stats
        s.update(client_graph_stats(d, info.num_classes))
    if info.task == "edge" and getattr(d, "edge_y", None) is not None:
        ys = torch.cat([d.edge_y, d.cross_edge_y])
        s["positive_edges"] = int((ys == 1).sum())
    return s


def partition_stats(data, info: DatasetInfo, clients: list[ClientData]) -> dict:
    from torch_geometric.utils import is_undirected

    n = data.num_nodes
    counts = torch.zeros(n, dtype=torch.long)
    for c in clients:
        counts[c.nodes] += 1
    edges = [c.stats["edges"] for c in clients]
    undirected = info.task in ("node", "link") and is_undirected(data.edge_index, num_nodes=n)
    owner = torch.full((n,), -1, dtype=torch.long)
    for c in clients:
        owner[c.nodes] = c.cid
    ei = data.edge_index
    crossing = int((owner[ei[0]] != owner[ei[1]]).sum()) // (2 if undirected else 1)
    return {
        "num_clients": len(clients),
        "nodes_unowned": int((counts == 0).sum()),
        "nodes_owned_more_than_once": int((counts > 1).sum()),
        "cross_client_edges": crossing if int((counts > 1).sum()) == 0 else None,
        "ls_ratio": max(edges) / max(min(edges), 1),
        "clients": [c.stats for c in clients],
    }


def check_num_clients(num_clients: int, num_nodes: int) -> None:
    if num_clients > num_nodes:
        raise DataError(f"partitioner.num_clients={num_clients} is larger than the graph's {num_nodes} nodes")
