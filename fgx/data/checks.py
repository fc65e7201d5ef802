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
        elif info.task == "graph" and int(d.graph_train_mask.sum()) == 0:
            empty.append(c.cid)
    if empty:
        items = {"node": "nodes", "graph": "graphs"}.get(info.task, "edges")
        shown = ", ".join(map(str, empty[:10])) + (" ..." if len(empty) > 10 else "")
        raise DataError(f"partitioner '{partitioner}': client(s) {shown} of {len(clients)} hold no training {items}; "
                        f"use fewer clients (partitioner.num_clients), another partitioner, or a larger train split")


def check_arrays(where: str, x=None, edges=None, y=None, num_classes: int | None = None,
                 masks: dict | None = None, edges_rows: bool = False) -> int:
    """Check the arrays a raw file (or folder) holds before anything is built from them; every
    problem is a DataError that starts with ``where`` (the file). ``edges``: [2, E] (or [E, 2] with
    ``edges_rows``) node indices; ``y``: one label per node; ``masks``: name -> boolean array over
    the nodes (last axis). Accepts NumPy arrays or tensors. Returns the number of nodes."""
    import numpy as np

    def arr(a):
        return a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)

    n = None
    if x is not None:
        x = arr(x)
        if x.ndim != 2:
            raise DataError(f"{where}: node features must be a 2-D array [nodes, features], got shape {list(x.shape)}")
        if not (np.issubdtype(x.dtype, np.number) or x.dtype == np.bool_):
            raise DataError(f"{where}: node features must be numbers, got dtype {x.dtype}")
        if np.issubdtype(x.dtype, np.floating) and not np.isfinite(x).all():
            r, c = map(int, np.argwhere(~np.isfinite(x))[0])
            raise DataError(f"{where}: node features hold NaN or infinite values (first at node {r}, column {c})")
        n = x.shape[0]
    if y is not None:
        y = arr(y)
        if y.ndim != 1 or (n is not None and y.shape[0] != n):
            raise DataError(f"{where}: labels must be one per node ({n} nodes), got shape {list(y.shape)}")
        if not np.issubdtype(y.dtype, np.integer):
            if not (np.issubdtype(y.dtype, np.floating) and np.isfinite(y).all() and (y == np.round(y)).all()):
                raise DataError(f"{where}: labels must be integers, got dtype {y.dtype}")
        n = y.shape[0] if n is None else n
        if y.size and (y.min() < 0 or (num_classes is not None and y.max() >= num_classes)):
            bad = int(y.min()) if y.min() < 0 else int(y.max())
            allowed = f"[0, {num_classes})" if num_classes is not None else ">= 0"
            raise DataError(f"{where}: labels must lie in {allowed}; found {bad}")
    if edges is not None:
        e = arr(edges)
        if e.size == 0:
            e = e.reshape(0, 2) if edges_rows else e.reshape(2, 0)
        shape_ok = e.ndim == 2 and (e.shape[1] == 2 if edges_rows else e.shape[0] == 2)
        if not shape_ok:
            want = "[edges, 2]" if edges_rows else "[2, edges]"
            raise DataError(f"{where}: edges must be an integer array of shape {want}, got {list(e.shape)}")
        if not np.issubdtype(e.dtype, np.integer):
            raise DataError(f"{where}: edge endpoints must be integer node indices, got dtype {e.dtype}")
        if e.size and (e.min() < 0 or (n is not None and e.max() >= n)):
            bad = int(e.min()) if e.min() < 0 else int(e.max())
            raise DataError(f"{where}: edge endpoints must lie in [0, {n}); found {bad}")
    for name, m in (masks or {}).items():
        m = arr(m)
        if m.dtype != np.bool_ and not (np.issubdtype(m.dtype, np.integer) and np.isin(m, (0, 1)).all()):
            raise DataError(f"{where}: {name} must be boolean, got dtype {m.dtype}")
        if m.ndim == 0 or (n is not None and m.shape[-1] != n):
            raise DataError(f"{where}: {name} must have one entry per node ({n}) on its last axis, "
                            f"got shape {list(m.shape)}")
    return int(n or 0)
