"""``partitioner=given``: the clients a dataset brings with it (natural clients, e.g. FedGB's banks
or hospitals). The dataset marks each node's client in ``data.client``; nothing is simulated."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from fgx.config import ConfigError
from fgx.data.base import DataError
from fgx.registry import PARTITIONERS


@dataclass
class GivenParams:
    pass


@PARTITIONERS.register("given", params=GivenParams, tasks=("node", "edge", "link"))
def given_partition(p: GivenParams, data, info, seed: int) -> list[torch.Tensor]:
    owner = getattr(data, "client", None)
    if not isinstance(owner, torch.Tensor) or owner.numel() != data.num_nodes:
        raise DataError(f"partitioner 'given': dataset '{info.name}' marks no client per node (data.client)")
    n = int(owner.max()) + 1
    clients = [(owner == c).nonzero().view(-1) for c in range(n)]
    empty = [c for c, nodes in enumerate(clients) if nodes.numel() == 0]
    if empty or int(owner.min()) < 0:
        raise DataError(f"partitioner 'given': dataset '{info.name}' has client ids without nodes ({empty[:10]})")
    return clients


def _check_config(params, validated) -> None:
    ds = validated.entries["dataset"]
    if ds.meta.get("clients") != "given":
        raise ConfigError("partitioner.name", "given", f"a partitioner that makes clients: dataset "
                          f"'{validated.names['dataset']}' brings no clients of its own (datasets that do: "
                          f"fedgb)")


given_partition.check_config = _check_config
