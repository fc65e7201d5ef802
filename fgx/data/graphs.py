"""Graph collections (task ``graph``): many small graphs, one label each, as one global ``Data``.

The collection is stored as the disjoint union of its graphs (PyG's ``Batch`` layout), so the rest of
fgx (partitioners, client views, the channel) sees one graph as for every other task:

- ``x [N, F]``, ``edge_index [2, E]``: the nodes and edges of all graphs, graph after graph;
- ``graph [N]``: the graph each node belongs to (PyG's ``batch`` vector; graphs are contiguous);
- ``graph_y [G]``: the label of each graph; ``graph_{train,val,test}_mask [G]``: the split by graph;
- ``graph_source [G]``: which member dataset a graph came from (several TU datasets in one group).

A partitioner of the graph task hands each client whole graphs (``nodes_of_graphs``); a client's view
re-numbers its graphs 0..g-1 (``attach_graphs``)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from fgx.data.base import DataError, random_split

if TYPE_CHECKING:
    from torch_geometric.data import Data

GRAPH_MASKS = ("graph_train_mask", "graph_val_mask", "graph_test_mask")


def collection(graphs: list, labels: torch.Tensor, split: tuple[float, float], seed: int,
               source: torch.Tensor | None = None) -> "Data":
    """The disjoint union of ``graphs`` (PyG ``Data`` with ``x`` and ``edge_index``) with one label
    each and a random train/val/test split by graph (fractions ``split``, seeded)."""
    from torch_geometric.data import Batch, Data

    if not graphs:
        raise DataError("a graph collection needs at least one graph")
    b = Batch.from_data_list([Data(x=g.x, edge_index=g.edge_index, num_nodes=g.num_nodes) for g in graphs])
    data = Data(x=b.x.float(), edge_index=b.edge_index, num_nodes=b.num_nodes)
    data.graph = b.batch
    data.graph_y = labels.view(-1).clone()
    for name, m in zip(GRAPH_MASKS, random_split(len(graphs), split[0], split[1], seed)):
        setattr(data, name, m)
    data.graph_source = (torch.zeros(len(graphs), dtype=torch.long) if source is None else source.long())
    return data


def graph_ptr(data) -> torch.Tensor:
    """[G + 1] offsets: graph g owns nodes ptr[g]..ptr[g+1]-1."""
    counts = torch.bincount(data.graph, minlength=int(data.graph_y.numel()))
    return torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)])


def nodes_of_graphs(data, parts: list) -> list[torch.Tensor]:
    """Each client's node ids from its list of graph ids (what ``build_clients`` takes)."""
    ptr = graph_ptr(data)
    out = []
    for cid, gids in enumerate(parts):
        gids = torch.as_tensor(np.asarray(gids, dtype=np.int64)).view(-1)
        if gids.numel() == 0:
            raise DataError(f"client {cid} holds no graphs (more clients than graphs?)")
        out.append(torch.cat([torch.arange(int(ptr[g]), int(ptr[g + 1])) for g in gids.tolist()]))
    return out


def check_num_clients(num_clients: int, data) -> None:
    g = int(data.graph_y.numel())
    if num_clients > g:
        raise DataError(f"partitioner.num_clients={num_clients} is larger than the collection's {g} graphs")


def attach_graphs(cd, data, nodes: torch.Tensor) -> None:
    """Give a client's local graph (``cd``, over ``nodes`` in sorted order) its graphs: ``graph`` (local
    graph ids 0..g-1 per node), ``graph_y``, the split masks and ``graph_ids`` (global ids). A
    partitioner that cut a graph between clients is refused."""
    g = data.graph[nodes]
    gids, local = torch.unique(g, return_inverse=True)
    have = torch.bincount(local, minlength=gids.numel())
    full = torch.bincount(data.graph, minlength=int(data.graph_y.numel()))[gids]
    if not torch.equal(have, full):
        cut = int(gids[(have != full).nonzero()[0, 0]])
        raise DataError(f"graph {cut} is split between clients: a partitioner of the graph task must give "
                        f"each client whole graphs")
    cd.graph = local
    cd.graph_ids = gids
    cd.graph_y = data.graph_y[gids]
    for m in GRAPH_MASKS:
        setattr(cd, m, getattr(data, m)[gids])
    cd.graph_source = data.graph_source[gids]


def client_graph_stats(cd, num_classes: int) -> dict:
    """partition.json's facts about one client's graphs: count, label histogram, sizes, splits."""
    sizes = torch.bincount(cd.graph, minlength=int(cd.graph_y.numel())).float()
    deg = torch.bincount(cd.graph[cd.edge_index[0]], minlength=sizes.numel()).float() / sizes.clamp(min=1)
    s = {"graphs": int(cd.graph_y.numel()),
         "graph_nodes_mean": float(sizes.mean()), "graph_nodes_min": int(sizes.min()), "graph_nodes_max": int(sizes.max()),
         "graph_degree_mean": float(deg.mean()),
         "sources": sorted(set(cd.graph_source.tolist()))}
    if num_classes > 0:
        s["label_counts"] = torch.bincount(cd.graph_y.long(), minlength=num_classes).tolist()
    for m in GRAPH_MASKS:
        s[m.replace("graph_", "").replace("_mask", "")] = int(getattr(cd, m).sum())
    return s


def check_collection(data, num_classes: int, name: str) -> None:
    """Labels in range, one per graph, a non-empty training split."""
    y, G = data.graph_y, int(data.graph_y.numel())
    if y.dim() != 1 or G != int(data.graph.max()) + 1:
        raise DataError(f"dataset '{name}': {G} graph labels for {int(data.graph.max()) + 1} graphs")
    if num_classes > 0 and (int(y.min()) < 0 or int(y.max()) >= num_classes):
        raise DataError(f"dataset '{name}': graph labels must lie in [0, {num_classes}); found "
                        f"{int(y.min()) if int(y.min()) < 0 else int(y.max())}")
    if int(data.graph_train_mask.sum()) == 0:
        raise DataError(f"dataset '{name}': no graph in the training split ({G} graphs)")

