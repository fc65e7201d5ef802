"""Bipartite ranking data: users split uniformly at random; a client owns its users and every item
they interacted with (items may be owned by several clients)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fgx.config import spec
from fgx.data.base import DataError
from fgx.registry import PARTITIONERS


@dataclass
class RandomUsersParams:
    num_clients: int = field(default=4, metadata=spec(min=1))


def clients_from_user_labels(data, labels: torch.Tensor, num_clients: int) -> list[torch.Tensor]:
    """Owned node ids per client from a client label per user: its users plus their items."""
    u, i = data.edge_index
    out = []
    for c in range(num_clients):
        users = (labels == c).nonzero().view(-1)
        if users.numel() == 0:
            raise DataError(f"client {c} got no users (partitioner.num_clients={num_clients} too large?)")
        items = torch.unique(i[(labels[u] == c)])
        out.append(torch.cat([users, items]))
    return out


def check_bipartite(data, name: str) -> None:
    if getattr(data, "num_users", None) is None:
        raise DataError(f"partitioner '{name}' needs a user-item (ranking) dataset")


@PARTITIONERS.register("random_users", params=RandomUsersParams, tasks=("ranking",))
def random_users(p: RandomUsersParams, data, info, seed: int) -> list[torch.Tensor]:
    check_bipartite(data, "random_users")
    # salted: the dataset's split permutes with the bare seed, and reusing that stream would
    # hand one client all the training nodes
    g = torch.Generator().manual_seed(seed * 7919 + 104729)
    labels = torch.randperm(data.num_users, generator=g) % p.num_clients
    return clients_from_user_labels(data, labels, p.num_clients)
