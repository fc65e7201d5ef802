"""Uniformly random node assignment (the papers' i.i.d. baseline partition)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fgx.config import spec
from fgx.partition.base import check_num_clients
from fgx.registry import PARTITIONERS


@dataclass
class RandomParams:
    num_clients: int = field(default=4, metadata=spec(min=1))


@PARTITIONERS.register("random", params=RandomParams, tasks=("node", "edge"))
def random_partition(p: RandomParams, data, info, seed: int) -> list[torch.Tensor]:
    check_num_clients(p.num_clients, data.num_nodes)
    # salted: the dataset's split permutes with the bare seed, and reusing that stream would
    # hand one client all the training nodes
    g = torch.Generator().manual_seed(seed * 7919 + 104729)
    perm = torch.randperm(data.num_nodes, generator=g)
    return list(torch.tensor_split(perm, p.num_clients))
