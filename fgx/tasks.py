"""How a client's local graph is seen by a model, and which items carry labels, per task.

Node tasks: items are owned nodes. Edge tasks: items are the edges a client holds (internal and
cross-client; cross-client edges are held by both incident clients). Graph tasks: items are the
client's graphs (fgx/data/graphs.py); the model outputs one row per graph. Link tasks: items are the
labelled node pairs of the client's link-task graph (fgx/link/split.py); one row per pair."""
from __future__ import annotations

import torch

SPLITS = ("train", "val", "test")
ITEM_PREFIX = {"edge": "edge_", "graph": "graph_", "link": "link_"}     # attribute prefix of a task's items (node: none)


def local_view(client, task: str, include_cross: bool):
    """The graph a client's model runs on. ``include_cross`` adds cross-client edges (whose remote
    endpoints are halo nodes with zero features); without it node tasks see only the owned subgraph."""
    from torch_geometric.data import Data

    d = client.data
    if task == "link":     # the client's link-task graph (fgx/link/split.py): training positives only
        view = Data(x=d.x, edge_index=d.edge_index, num_nodes=d.num_nodes)
        for k in ("link_index", "link_y", "link_train_mask", "link_val_mask", "link_test_mask", "link_redraw",
                  "link_forbidden"):
            if getattr(d, k, None) is not None:
                setattr(view, k, getattr(d, k))
        view.num_owned = client.num_owned
        return view
    if task == "graph":    # whole graphs: no cross-client edges exist
        view = Data(x=d.x, edge_index=d.edge_index, num_nodes=d.num_nodes)
        for k in ("graph", "graph_y", "graph_train_mask", "graph_val_mask", "graph_test_mask"):
            setattr(view, k, getattr(d, k))
        view.num_owned = client.num_owned
        return view
    if task == "edge":
        # cross-client edges are items of the edge task: always kept
        view = Data(x=d.x, num_nodes=d.num_nodes)
        view.edge_index = torch.cat([d.edge_index, d.cross_edge_index], 1)
        for k in ("edge_attr", "edge_y", "edge_train_mask", "edge_val_mask", "edge_test_mask"):
            if getattr(d, k, None) is not None:
                setattr(view, k, torch.cat([getattr(d, k), getattr(d, "cross_" + k)], 0))
        view.is_cross = torch.cat([torch.zeros(d.edge_index.size(1), dtype=torch.bool),
                                   torch.ones(d.cross_edge_index.size(1), dtype=torch.bool)])
        view.num_owned = client.num_owned
        return view
    if include_cross:
        ei = torch.cat([d.edge_index, d.cross_edge_index, d.cross_edge_index.flip(0)], 1)
        view = Data(x=d.x, edge_index=ei, y=d.y, num_nodes=d.num_nodes)
    else:
        n = client.num_owned
        view = Data(x=d.x[:n], edge_index=d.edge_index, y=d.y[:n], num_nodes=n)
        for m in ("train_mask", "val_mask", "test_mask"):
            setattr(view, m, getattr(d, m)[:n])
        view.num_owned = n
        return view
    for m in ("train_mask", "val_mask", "test_mask"):
        setattr(view, m, getattr(d, m))
    view.num_owned = client.num_owned
    return view


def split_mask(view, task: str, split: str) -> torch.Tensor:
    """The mask of ``split``'s items over the model's outputs (edges or nodes)."""
    return getattr(view, f"{ITEM_PREFIX.get(task, '')}{split}_mask")


def targets(view, task: str, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(mask over the model's outputs, labels of the masked items)."""
    mask = split_mask(view, task, split)
    return mask, getattr(view, f"{ITEM_PREFIX.get(task, '')}y")[mask]


def class_weights(labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Inverse-frequency class weights (for imbalanced tasks such as AML), mean 1."""
    counts = torch.bincount(labels, minlength=num_classes).float().clamp(min=1)
    w = counts.sum() / counts
    return w / w.mean()
