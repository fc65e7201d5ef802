"""Banks grouped into clients (CE-FedGNN's AML partition): each client owns its banks' accounts.

Greedy balancing (largest bank first, to the client with the fewest so far) of the transactions
touching each bank (``balance: edges``), of accounts (``nodes``), or a seeded random assignment."""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import torch

from fgx.config import spec
from fgx.data.base import DataError
from fgx.registry import PARTITIONERS


@dataclass
class ByBankParams:
    num_clients: int = field(default=4, metadata=spec(min=1))
    balance: str = field(default="edges", metadata=spec(choices=["edges", "nodes", "random"]))


def bank_loads(data, balance: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(distinct banks, load of each): transactions with an endpoint in the bank, or accounts."""
    banks, node_bank = torch.unique(data.node_bank, return_inverse=True)
    if balance == "nodes":
        return banks, torch.bincount(node_bank, minlength=banks.numel())
    ei = data.edge_index
    b_src, b_dst = node_bank[ei[0]], node_bank[ei[1]]
    load = torch.bincount(b_src, minlength=banks.numel())
    load += torch.bincount(b_dst[b_src != b_dst], minlength=banks.numel())
    return banks, load


def assign_banks(load: torch.Tensor, num_clients: int, balance: str, seed: int) -> torch.Tensor:
    """Client of each bank index."""
    nb = load.numel()
    if balance == "random":
        g = torch.Generator().manual_seed(seed)
        client = torch.randperm(nb, generator=g) % num_clients
        return client
    client = torch.empty(nb, dtype=torch.long)
    heap = [(0, c) for c in range(num_clients)]
    # stable order: by load descending, then bank index
    order = sorted(range(nb), key=lambda b: (-int(load[b]), b))
    for b in order:
        total, c = heapq.heappop(heap)
        client[b] = c
        heapq.heappush(heap, (total + int(load[b]), c))
    return client


@PARTITIONERS.register("by_bank", params=ByBankParams, tasks=("edge",))
def by_bank(p: ByBankParams, data, info, seed: int) -> list[torch.Tensor]:
    if getattr(data, "node_bank", None) is None:
        raise DataError(f"partitioner=by_bank needs a dataset with node_bank (AML); {info.name} has none")
    banks, load = bank_loads(data, p.balance)
    if p.num_clients > banks.numel():
        raise DataError(f"partitioner.num_clients={p.num_clients} is larger than the {banks.numel()} banks")
    client_of_bank = assign_banks(load, p.num_clients, p.balance, seed)
    _, node_bank = torch.unique(data.node_bank, return_inverse=True)
    client_of_node = client_of_bank[node_bank]
    return [(client_of_node == c).nonzero().view(-1) for c in range(p.num_clients)]
