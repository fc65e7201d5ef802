"""Sanity checks on what a dataset and a partitioner produce, before any training: a broken
input fails here with a message that names it, not later inside torch."""
from __future__ import annotations

import torch

from fgx.data.base import DataError, GraphDataset


def check_graph(ds: GraphDataset, name: str) -> None:
    d, info = ds.data, ds.info
    n = d.num_nodes
    if n is None or n == 0:
        raise DataError(f"dataset '{name}' has no nodes")
    ei = getattr(d, "edge_index", None)
    if ei is not None and ei.numel():
        if ei.dim() != 2 or ei.size(0) != 2:
            raise DataError(f"dataset '{name}': edge_index must have shape [2, E], got {list(ei.shape)}")
        lo, hi = int(ei.min()), int(ei.max())
        if lo < 0 or hi >= n:
            raise DataError(f"dataset '{name}': edge endpoints must lie in [0, {n}); found {lo if lo < 0 else hi}")
    for attr in ("x", "edge_attr"):
        t = getattr(d, attr, None)
        if isinstance(t, torch.Tensor) and t.is_floating_point() and not torch.isfinite(t).all():
            bad = (~torch.isfinite(t)).nonzero()[0].tolist()
            what = "node" if attr == "x" else "edge"
            raise DataError(f"dataset '{name}': {what} features hold NaN or infinite values "
                            f"(first at {what} {bad[0]}, column {bad[-1]}); clean or impute them first")
    if info.task == "node" and info.num_classes > 0 and getattr(d, "y", None) is not None:
        mask = d.train_mask | d.val_mask | d.test_mask if getattr(d, "train_mask", None) is not None else None
        y = d.y[mask] if mask is not None else d.y
        if y.numel() and (int(y.min()) < 0 or int(y.max()) >= info.num_classes):
            raise DataError(f"dataset '{name}': labelled nodes must have labels in [0, {info.num_classes}); "
                            f"found {int(y.min()) if int(y.min()) < 0 else int(y.max())}")


def check_clients(clients, info, partitioner: str) -> None:
    """Every client of a node or edge task must own training items (a client without them cannot
    train, and averaging weights by zero items hides it)."""
    empty = []
    for c in clients:
        d = c.data
        if info.task == "node" and getattr(d, "train_mask", None) is not None:
            if int(d.train_mask[: c.num_owned].sum()) == 0:
                empty.append(c.cid)
        elif info.task == "edge" and getattr(d, "edge_train_mask", None) is not None:
            cross = getattr(d, "cross_edge_train_mask", None)
            total = int(d.edge_train_mask.sum()) + (int(cross.sum()) if cross is not None else 0)
            if total == 0:
                empty.append(c.cid)
    if empty:
        items = "nodes" if info.task == "node" else "edges"
        shown = ", ".join(map(str, empty[:10])) + (" ..." if len(empty) > 10 else "")
        raise DataError(f"partitioner '{partitioner}': client(s) {shown} of {len(clients)} hold no training {items}; "
                        f"use fewer clients (partitioner.num_clients), another partitioner, or a larger train split")
