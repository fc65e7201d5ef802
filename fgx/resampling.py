"""What a run keeps of its test items so that a table can test an ordering on them (fgx/tables/stats.py).

A table compares two methods on one model state of each run: the final round (``final``), the round
chosen on the mean validation score (``best``) or each client's own best validation round
(``best_client``). Per state and metric a run keeps bootstrap replicates of its test metric over the
test items (fgx.metrics.bootstrap_replicates). Every run draws them from one stream over its distinct
test items, identified by their global ids (node, edge or graph of the dataset; a link task's positive pair,
drawn with its row of negatives; a ranking task's user; a regression task's test row), so two runs on the same items (two methods of one seed; seeds that share
the split) get the same resamples: replicate b of a minus replicate b of b is a paired resample of their
difference, and the mean over seeds of those is a joint resample of the seeds' mean difference. An item
that several clients hold (overlapping partitions, an edge between two clients) is drawn once and
counts in every client that holds it.

Summary ``sampling``::

    {"reps": 200, "split": {state: "<hash of the distinct test item ids>" | null}, "items": {state: 1000},
     "copies": {state: 1200},
     "final": {"accuracy": {"m": mean, "d": "<base64 float16 deviations>"}, ...}, "best": {...},
     "best_client": {...}, "final_sd": {"accuracy": ...}}

A state's ``split`` is null when the items have no ids (an algorithm that scores items its own way): the
replicates are then paired only between runs of one seed, and the table bounds the seeds' shared term.
"""
from __future__ import annotations

import torch

from fgx.metrics import (bootstrap_item_means, bootstrap_replicates, encode_replicates, replicate_sd,
                         split_key)

STATES = ("final", "best", "best_client")


def item_ids(algo, client, task: str, splits, subset: int | None, seed: int, labels: torch.Tensor,
             split: str = "test", cache: dict | None = None) -> torch.Tensor | None:
    """Global ids of the items ``algo.predict`` scored for ``client`` on ``split`` (in its order), or None
    when they cannot be told (an algorithm with a view of its own, whose labels do not match). ``cache``
    keeps them per client while its view is the same object (every evaluation of most runs)."""

    view = None
    for get in (lambda: algo.view_for(client), lambda: algo.clients[client.cid].view):
        try:
            view = get()
            break
        except (AttributeError, IndexError, KeyError, TypeError, NotImplementedError):
            continue
    if view is None:
        return None
    key = (client.cid, tuple(splits), subset, split)
    if cache is not None and key in cache and cache[key][0] is view:
        return cache[key][1]
    found = algo.__dict__.get("_eval_items", {}).get((client.cid, tuple(splits), subset))
    items = found[1] if found is not None and found[0] is view else None    # what predict found: not again
    ids = _global_ids(view, client, task, splits, subset, seed, labels, split, items)
    if cache is not None:
        cache[key] = (view, ids)
    return ids


def _global_ids(view, client, task, splits, subset, seed, labels, split, items=None) -> torch.Tensor | None:
    from fgx.algorithms.base import eval_items

    try:
        local, y = (items if items is not None else eval_items(view, task, tuple(splits), subset, seed,
                                                                client.cid))[split]
    except (AttributeError, KeyError, TypeError):
        return None
    local, y = local.cpu(), y.cpu()
    if local.numel() != labels.numel() or not torch.equal(y.long(), labels.long().cpu()):
        return None
    d = getattr(client, "data", None)
    fits = lambda n: local.numel() == 0 or int(local.max()) < n
    if task == "node" and getattr(client, "nodes", None) is not None and fits(client.num_owned):
        return client.nodes[local]
    if task == "graph" and getattr(d, "graph_ids", None) is not None and fits(d.graph_ids.numel()):
        return d.graph_ids[local]
    if task == "edge" and getattr(d, "global_edge_id", None) is not None:
        gid = torch.cat([d.global_edge_id, d.cross_global_edge_id])
        return gid[local] if fits(gid.numel()) else None
    return None


class StateItems:
    """The test items' scores of each model state a table may compare, kept as the rounds run."""

    def __init__(self):
        self.final: list | None = None
        self.best: list | None = None
        self.best_client: list | None = None      # per client: its items at its own best validation round

    def update(self, res: dict, best_is_new: bool, clients_improved: list[int]) -> None:
        items = (res.get("test") or {}).get("items")
        if items is None:
            return
        self.final = items
        if best_is_new:
            self.best = items
        if clients_improved:
            self.best_client = self.best_client or [None] * len(items)
            for i in clients_improved:
                self.best_client[i] = items[i]

    def summary(self, num_classes: int, minority, names: tuple[str, ...]) -> dict | None:
        """The ``sampling`` block of summary.json (None when the run kept no items)."""
        states = {s: getattr(self, s) for s in STATES}
        first = next((v for v in states.values() if v), None)
        if first is None:
            return None
        out: dict = {}
        for state, per_client in states.items():
            if not per_client or any(p is None for p in per_client):
                continue      # e.g. best_client of a client without validation items, or a resumed run
            reps, key, n_items, copies = _replicates(per_client, num_classes, minority, names)
            out[state] = {m: encode_replicates(v) for m, v in reps.items()}
            out.setdefault("reps", len(next(iter(reps.values()))) if reps else 0)
            out.setdefault("split", {})[state] = key
            out.setdefault("items", {})[state] = n_items
            out.setdefault("copies", {})[state] = copies
            if state == "final":
                out["final_sd"] = {m: replicate_sd(v) for m, v in reps.items()}
        return out or None


def _replicates(per_client: list, num_classes: int, minority, names) -> tuple[dict, str | None, int, int]:
    """Replicates of one state: classification items (scores, labels, ids), a link task's pairs
    (fgx.link.evaluate.LinkItems) or per-item values (ids, {m: v})."""
    from fgx.link.evaluate import LinkItems, link_replicates

    if isinstance(per_client[0], LinkItems):
        ids = torch.cat([p.ids for p in per_client])
        return link_replicates(per_client), split_key(ids), int(torch.unique(ids).numel()), int(ids.numel())
    ids_all = [p[-1] if len(p) == 3 else p[0] for p in per_client]
    known = all(i is not None for i in ids_all)
    group = torch.cat([torch.full((_n(p),), c, dtype=torch.long) for c, p in enumerate(per_client)])
    if known:
        ids = torch.cat([i.long().cpu() for i in ids_all])
    else:          # no ids: each client's items are its own (client c, position j)
        ids = None
    n_distinct = int(torch.unique(ids).numel()) if ids is not None else int(group.numel())
    if len(per_client[0]) == 3:           # classification: (scores, labels, ids)
        scores = torch.cat([p[0].float().cpu() for p in per_client])
        labels = torch.cat([p[1].cpu() for p in per_client])
        reps = bootstrap_replicates(scores, labels, group, len(per_client), num_classes, minority, names, ids)
    else:                                 # per-item values: (ids, {metric: values})
        metrics = list(per_client[0][1])
        values = {m: torch.cat([p[1][m].double().cpu() for p in per_client]) for m in metrics}
        reps = bootstrap_item_means(values, group, len(per_client), ids)
    return reps, split_key(ids), n_distinct, int(group.numel())


def _n(p) -> int:
    return int(p[1].numel()) if len(p) == 3 else int(next(iter(p[1].values())).numel())
