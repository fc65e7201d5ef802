"""User-item interaction data and how fgx stores it in one PyG graph.

Node ids: users are 0..U-1, items are U..U+I-1. ``edge_index`` holds one column per interaction,
user -> item, with ``edge_train_mask/edge_val_mask/edge_test_mask`` (the per-user split). Because
users and items are nodes of one graph, the core's partition contract (owned node ids per client)
fits: a client owns its users plus every item they interacted with (items may be owned by several
clients), and ``build_clients`` then gives it exactly its users' interactions as internal edges."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fgx.data.base import DataError


@dataclass
class Interactions:
    """Binary implicit feedback: parallel arrays of (user, item) pairs, ids 0-based and dense."""
    users: np.ndarray
    items: np.ndarray
    num_users: int
    num_items: int

    def __post_init__(self):
        if self.users.shape != self.items.shape:
            raise DataError("users and items arrays differ in length")


def densify(raw_users: np.ndarray, raw_items: np.ndarray) -> Interactions:
    """Deduplicate pairs and map raw ids to 0..U-1 / 0..I-1 (sorted raw order)."""
    pairs = np.unique(np.stack([raw_users, raw_items], 1), axis=0)
    u_ids, users = np.unique(pairs[:, 0], return_inverse=True)
    i_ids, items = np.unique(pairs[:, 1], return_inverse=True)
    return Interactions(users.astype(np.int64), items.astype(np.int64), len(u_ids), len(i_ids))


def k_core(x: Interactions, k: int) -> Interactions:
    """Repeatedly drop users and items with fewer than ``k`` interactions (then re-index)."""
    u, i = x.users, x.items
    while True:
        du = np.bincount(u, minlength=x.num_users)
        di = np.bincount(i, minlength=x.num_items)
        keep = (du[u] >= k) & (di[i] >= k)
        if keep.all():
            break
        u, i = u[keep], i[keep]
    return densify(u, i)


def min_user_interactions(x: Interactions, k: int) -> Interactions:
    """The paper's "imbalanced" filter: keep users with at least ``k`` interactions (default 8)."""
    du = np.bincount(x.users, minlength=x.num_users)
    keep = du[x.users] >= k
    return densify(x.users[keep], x.items[keep])


def per_user_split(x: Interactions, val: float, test: float, seed: int) -> np.ndarray:
    """Per-user random split: 0 = train, 1 = val, 2 = test for each interaction. Users with fewer
    than 3 interactions keep everything in train; others get max(1, round(frac * n)) val and test."""
    rng = np.random.default_rng(seed)
    split = np.zeros(len(x.users), dtype=np.int8)
    order = np.argsort(x.users, kind="stable")
    bounds = np.searchsorted(x.users[order], np.arange(x.num_users + 1))
    for u in range(x.num_users):
        idx = order[bounds[u]:bounds[u + 1]]
        n = len(idx)
        if n < 3:
            continue
        idx = idx[rng.permutation(n)]
        n_te = max(1, int(round(test * n))) if test > 0 else 0
        n_va = max(1, int(round(val * n))) if val > 0 else 0
        split[idx[:n_te]] = 2
        split[idx[n_te:n_te + n_va]] = 1
    return split


def to_graph(x: Interactions, split: np.ndarray):
    """One PyG ``Data``: users then items as nodes, one user->item edge per interaction."""
    from torch_geometric.data import Data

    n = x.num_users + x.num_items
    ei = torch.from_numpy(np.stack([x.users, x.items + x.num_users])).long()
    s = torch.from_numpy(split.astype(np.int64))
    d = Data(edge_index=ei, num_nodes=n)
    d.x = torch.zeros((n, 0))          # no node features: ID embeddings live in the models
    d.edge_train_mask, d.edge_val_mask, d.edge_test_mask = s == 0, s == 1, s == 2
    d.num_users, d.num_items = x.num_users, x.num_items
    d.is_user = torch.arange(n) < x.num_users
    return d


@dataclass
class ClientInteractions:
    """One client's interactions in its own index space: users 0..M-1, items 0..N-1 (the items its
    users touched in training). ``users_global``/``items_global`` map back to dataset ids."""
    users_global: torch.Tensor
    items_global: torch.Tensor
    train: torch.Tensor   # [2, E_train] (user, item) local ids
    val: torch.Tensor
    test: torch.Tensor

    @property
    def num_users(self) -> int:
        return int(self.users_global.numel())

    @property
    def num_items(self) -> int:
        return int(self.items_global.numel())


def client_interactions(client, num_users: int) -> ClientInteractions:
    """Re-index a core ``ClientData`` (users and items as owned nodes) into a ClientInteractions.
    Val/test pairs whose item is not among the client's training items are dropped: a client can
    only score items it holds (spec 4.2)."""
    d = client.data
    nodes = client.nodes
    ei = d.edge_index
    glob = nodes[ei]                       # internal edges: both ends owned
    is_user_src = glob[0] < num_users
    u_loc, i_loc = torch.where(is_user_src, ei[0], ei[1]), torch.where(is_user_src, ei[1], ei[0])
    tr = d.edge_train_mask
    users_loc = torch.unique(u_loc)
    items_loc = torch.unique(i_loc[tr])
    umap = torch.full((nodes.numel() + client.num_halo,), -1, dtype=torch.long)
    umap[users_loc] = torch.arange(users_loc.numel())
    imap = torch.full_like(umap, -1)
    imap[items_loc] = torch.arange(items_loc.numel())
    pairs = torch.stack([umap[u_loc], imap[i_loc]])

    def pick(mask):
        p = pairs[:, mask]
        return p[:, p[1] >= 0]

    return ClientInteractions(users_global=nodes[users_loc], items_global=nodes[items_loc] - num_users,
                              train=pick(tr), val=pick(d.edge_val_mask), test=pick(d.edge_test_mask))
