"""The link task's data: the global graph as undirected node pairs with their split, and each client's
link-task graph.

``as_link_dataset``: every edge becomes one undirected pair (self-loops and repeats dropped, a repeated
pair keeps its earliest time), and each pair gets its split once for the whole graph, at random
(``task.val``/``task.test`` shares) or by time (test: pairs first seen at the last time, val: at the one
before, train: earlier, or the last ``task.window`` times). A pair held by two clients is therefore in
the same split at both. The partitioner then sees the whole graph, as in OpenFGL's link task.

``client_link_graphs``: each client's graph for the link task, from its partition view
(fgx/partition/base.py). Its message-passing graph is its training positives only (both directions), so
no validation or test pair reaches an embedding. Its labelled pairs are, per split, the positives it
holds, then ``m`` negatives per positive (``task.train_negatives`` for train, ``task.eval_negatives``
otherwise), positive by positive: the positive's source with another destination among the client's
nodes, never a pair the client knows to be an edge (any split, cross-client edges included) nor a
self-loop. With ``task.resample`` a training step scores
fresh destinations for the training negatives (``fresh_pairs``). Cross-client edges follow ``task.cross_client``: left out (``exclude``), held by both
clients (``both``) or by the owner of the smaller node id (``source``); a held one's remote end is a
halo node with zero features, and a negative's source is always a node the client owns, so every
negative is a pair whose absence the client knows.

Why not PyG's RandomLinkSplit or structured_negative_sampling: RandomLinkSplit splits one graph and
draws negatives against that graph's edges only (it knows nothing of owned and halo nodes, so a pair of
two remote nodes could be drawn though it is an edge between two other clients) and gives the test
graph's message passing the validation edges; structured_negative_sampling avoids exactly the edges it
corrupts (one tensor for both), draws from the global random state (the order clients are set up in
would change the negatives) and loops forever when a node is adjacent to every other. The rejection loop
here is the same as structured_negative_sampling's, against all known edges, with the client's own
generator, and a bounded fallback that leaves out a positive whose source has no non-neighbour."""
from __future__ import annotations

import torch

from fgx.data.base import DataError, DatasetInfo, GraphDataset

SPLITS = ("train", "val", "test")
CODE = {s: i for i, s in enumerate(SPLITS)}     # a pair's split; -1: in the graph, never trained on nor scored
MAX_TRIES = 64


def as_link_dataset(ds: GraphDataset, task, seed: int) -> GraphDataset:
    """The dataset as a link task: undirected pairs (both directions in ``edge_index``) and the split of
    each directed edge (``link_split``, aligned with ``edge_index``)."""
    from torch_geometric.data import Data

    data, n = ds.data, ds.data.num_nodes
    keys, first_time = unique_pairs(data.edge_index, n, getattr(data, "edge_time", None))
    if keys.numel() == 0:
        raise DataError(f"dataset '{ds.info.name}' has no edges between distinct nodes: nothing to predict")
    seed = seed if task.split_seed is None else task.split_seed
    split = temporal_split(first_time, task.window, ds.info.name) if task.split == "temporal" else \
        random_split(keys.numel(), task.val, task.test, seed)
    lo, hi = keys // n, keys % n
    g = Data(x=data.x, edge_index=torch.cat([torch.stack([lo, hi]), torch.stack([hi, lo])], 1), num_nodes=n)
    if getattr(data, "y", None) is not None and data.y.numel() == n:
        g.y = data.y            # node labels: for partitioners that read them (never a link-task target)
    g.link_split = torch.cat([split, split])
    counts = {s: int((split == CODE[s]).sum()) for s in SPLITS}
    info = ds.info
    extra = {**{k: v for k, v in info.extra.items() if isinstance(v, (str, int, float, bool))},
             "link_source_task": info.task, "link_split": task.split, "link_pairs": int(keys.numel()),
             **{f"link_{s}_pairs": c for s, c in counts.items()}, "link_cross_client": task.cross_client}
    return GraphDataset(g, DatasetInfo(name=info.name, task="link", num_classes=2, main_metric=task.main_metric,
                                       source=info.source, features_public=info.features_public, extra=extra))


def unique_pairs(edge_index: torch.Tensor, n: int, time: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Sorted keys ``lo * n + hi`` of the undirected pairs (lo < hi) and each pair's earliest time."""
    lo, hi = edge_index.min(0).values, edge_index.max(0).values
    keep = lo != hi
    keys, inverse = torch.unique(lo[keep] * n + hi[keep], return_inverse=True)
    if time is None:
        return keys, None
    t = time.view(-1)[keep].double()
    first = torch.full((keys.numel(),), float("inf"), dtype=torch.double).scatter_reduce(0, inverse, t, "amin")
    return keys, first


def random_split(num_pairs: int, val: float, test: float, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(num_pairs, generator=g)
    n_test, n_val = int(round(test * num_pairs)), int(round(val * num_pairs))
    split = torch.full((num_pairs,), CODE["train"], dtype=torch.long)
    split[perm[:n_test]] = CODE["test"]
    split[perm[n_test:n_test + n_val]] = CODE["val"]
    return split


def temporal_split(first_time: torch.Tensor | None, window: int | None, name: str) -> torch.Tensor:
    """Test: pairs first seen at the last time; val: at the one before; train: earlier (the last
    ``window`` times only, when set); pairs older than the window: -1."""
    if first_time is None:
        raise DataError(f"dataset '{name}' has no edge times (edge_time): the temporal split needs them")
    times = torch.unique(first_time)
    if times.numel() < 3:
        raise DataError(f"dataset '{name}': the temporal split needs at least 3 distinct edge times (train, val, "
                        f"test), found {times.numel()}")
    t_val, t_test = times[-2], times[-1]
    oldest = times[0] if window is None else times[max(0, times.numel() - 2 - window)]
    split = torch.full(first_time.shape, -1, dtype=torch.long)
    split[(first_time >= oldest) & (first_time < t_val)] = CODE["train"]
    split[first_time == t_val] = CODE["val"]
    split[first_time == t_test] = CODE["test"]
    return split


def client_link_graphs(clients: list, data, task, seed: int) -> None:
    """Replace each client's partition view by its link-task graph (module docstring), in place; the
    client's statistics get its pairs per split."""
    seed = seed if task.split_seed is None else task.split_seed
    empty = []
    for c in clients:
        c.data, c.halo, counts = client_graph(c, data, task, seed)
        c.stats.update(counts)
        if counts["link_train_positives"] == 0:
            empty.append(c.cid)
    if empty:
        shown = ", ".join(map(str, empty[:10])) + (" ..." if len(empty) > 10 else "")
        raise DataError(f"task=link: client(s) {shown} of {len(clients)} hold no training pair; use fewer clients "
                        f"(partitioner.num_clients), cross_client=both, or a smaller task.val/task.test")


def client_graph(c, data, task, seed: int):
    from torch_geometric.data import Data

    d, own = c.data, c.num_owned
    g = torch.Generator().manual_seed(seed * 1_000_003 + c.cid * 7919 + 17)
    ei, split_int = d.edge_index, data.link_split[d.global_edge_id]
    once = ei[0] < ei[1]                                  # each internal pair once
    internal, internal_split = ei[:, once], split_int[once]
    flip = torch.rand(internal.size(1), generator=g) < 0.5          # which end is the source
    internal = torch.where(flip, internal.flip(0), internal)
    ce, cross_split = d.cross_edge_index, data.link_split[d.cross_global_edge_id]
    owned_first = ce[0] < own                             # each cross pair once, the owned end first
    ce, cross_split = ce[:, owned_first], cross_split[owned_first]
    if task.cross_client == "exclude":
        held = torch.zeros(ce.size(1), dtype=torch.bool)
    elif task.cross_client == "both":
        held = torch.ones(ce.size(1), dtype=torch.bool)
    else:                                                 # source: the end with the smaller node id owns it
        held = c.nodes[ce[0]] < c.halo[ce[1] - own]
    kept_halo = torch.unique(ce[1, held])                 # old local ids of the halo nodes a held pair reaches
    remap = torch.full((own + c.num_halo,), -1, dtype=torch.long)
    remap[:own] = torch.arange(own)
    remap[kept_halo] = own + torch.arange(kept_halo.numel())
    n = own + kept_halo.numel()
    internal = remap[internal]
    visible = remap[ce[1]] >= 0                            # cross edges to a kept halo node, held or not
    known = torch.cat([internal, remap[ce[:, visible]]], 1)
    forbidden = torch.unique(torch.cat([known[0] * n + known[1], known[1] * n + known[0]]))
    held_pairs, held_split = remap[ce[:, held]], cross_split[held]

    positives = {s: torch.cat([internal[:, internal_split == CODE[s]], held_pairs[:, held_split == CODE[s]]], 1)
                 for s in SPLITS}
    mp = torch.cat([positives["train"], positives["train"].flip(0)], 1)   # message passing: training positives only
    pairs, labels, masks, counts = [], [], {s: [] for s in SPLITS}, {}
    for s in SPLITS:
        pos = positives[s]
        m = task.train_negatives if s == "train" else task.eval_negatives
        dst, ok = corrupt_destinations(pos[0], m, n, forbidden, g)
        pos, dst = pos[:, ok], dst[ok]
        neg = torch.stack([pos[0].repeat_interleave(m), dst.reshape(-1)])
        k = pos.size(1)
        pairs += [pos, neg]
        labels += [torch.ones(k, dtype=torch.long), torch.zeros(k * m, dtype=torch.long)]
        for t in SPLITS:
            masks[t].append(torch.full((k * (m + 1),), t == s, dtype=torch.bool))
        counts[f"link_{s}_positives"] = k
        counts[f"link_{s}_dropped"] = int((~ok).sum())    # positives whose source has no non-neighbour
    counts["link_cross_held"] = int(held.sum())
    out = Data(x=torch.cat([d.x[:own], d.x[kept_halo]]), edge_index=mp, num_nodes=n)
    out.cross_edge_index = torch.empty(2, 0, dtype=torch.long)    # held cross pairs are in edge_index already
    out.link_index = torch.cat(pairs, 1)
    out.link_y = torch.cat(labels)
    for s in SPLITS:
        setattr(out, f"link_{s}_mask", torch.cat(masks[s]))
    out.link_negatives = torch.tensor([task.train_negatives, task.eval_negatives, task.eval_negatives])
    if task.resample:     # what a training step needs to draw its own negatives (fresh_pairs)
        out.link_redraw = (out.link_train_mask & (out.link_y == 0)).nonzero().view(-1)
        out.link_forbidden = forbidden
    out.global_node_id = torch.cat([c.nodes, c.halo[kept_halo - own]])
    out.num_owned = own
    return out, c.halo[kept_halo - own], counts


def fresh_pairs(view) -> torch.Tensor:
    """``view.link_index`` with a new destination for every training negative, drawn from the global random
    state (inside a client's work the executor seeds it per run seed, round, call and client, so the draws
    are the same under any executor and after a resume); positives and the other splits unchanged."""
    pairs = view.link_index.clone()
    at = view.link_redraw
    dst, ok = corrupt_destinations(pairs[0, at], 1, view.num_nodes, view.link_forbidden, None)
    pairs[1, at[ok]] = dst.view(-1)[ok]
    return pairs


def in_sorted(keys: torch.Tensor, sorted_keys: torch.Tensor) -> torch.Tensor:
    """Whether each key is in ``sorted_keys`` (a binary search: torch.isin sorts both sides every call)."""
    if sorted_keys.numel() == 0:
        return torch.zeros_like(keys, dtype=torch.bool)
    at = torch.searchsorted(sorted_keys, keys).clamp(max=sorted_keys.numel() - 1)
    return sorted_keys[at] == keys


def corrupt_destinations(src: torch.Tensor, m: int, n: int, forbidden: torch.Tensor,
                         g: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``m`` destinations per source in [0, n), none a self-loop nor a pair in ``forbidden`` (sorted keys
    ``u * n + v``), drawn with ``g`` (None: the global generator); returns ([k, m] destinations, [k]
    whether the source had any non-neighbour)."""
    s = src.repeat_interleave(m)
    dst = torch.randint(n, (s.numel(),), generator=g) if n > 0 else torch.zeros(0, dtype=torch.long)
    bad = (dst == s) | in_sorted(s * n + dst, forbidden)
    for _ in range(MAX_TRIES):
        idx = bad.nonzero().view(-1)
        if idx.numel() == 0:
            break
        dst[idx] = torch.randint(n, (idx.numel(),), generator=g)
        bad[idx] = (dst[idx] == s[idx]) | in_sorted(s[idx] * n + dst[idx], forbidden)
    ok = torch.ones(src.numel(), dtype=torch.bool)
    for i in bad.nonzero().view(-1).tolist():             # a source adjacent to almost every node: exactly
        u = int(s[i])
        allowed = torch.ones(n, dtype=torch.bool)
        lo, hi = torch.searchsorted(forbidden, torch.tensor([u * n, (u + 1) * n]))
        allowed[forbidden[lo:hi] - u * n] = False
        allowed[u] = False
        choice = allowed.nonzero().view(-1)
        if choice.numel() == 0:
            ok[i // m] = False
        else:
            dst[i] = choice[torch.randint(choice.numel(), (1,), generator=g)]
    return dst.view(-1, m), ok
