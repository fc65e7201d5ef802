"""Overlapping METIS partition (FED-PUB / FedGSP §V-C): METIS splits the graph into
⌊M / samples_per_part⌋ parts; each part yields ``samples_per_part`` clients, each a random
``sample_fraction`` of the part's nodes (with their induced edges). Clients of one part overlap."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fgx.config import ConfigError, spec
from fgx.partition.base import check_num_clients
from fgx.partition.metis import metis_parts
from fgx.registry import PARTITIONERS


@dataclass
class MetisOverlappingParams:
    num_clients: int = field(default=10, metadata=spec(min=1, help="M; a multiple of samples_per_part"))
    samples_per_part: int = field(default=5, metadata=spec(min=1))
    sample_fraction: float = field(default=0.5, metadata=spec(gt=0.0, max=1.0))
    sample_seed: int | None = field(default=None, metadata=spec(help="seed of the half-samples; null: run seed"))

    def validate(self, prefix: str) -> None:
        if self.num_clients % self.samples_per_part:
            raise ConfigError(f"{prefix}.num_clients", self.num_clients,
                              f"a multiple of samples_per_part={self.samples_per_part} (e.g. 10, 30, 50)")


@PARTITIONERS.register("metis_overlapping", params=MetisOverlappingParams, tasks=("node",))
def metis_overlapping(p: MetisOverlappingParams, data, info, seed: int) -> list[torch.Tensor]:
    parts = p.num_clients // p.samples_per_part
    check_num_clients(parts, data.num_nodes)
    membership = torch.from_numpy(metis_parts(data.edge_index, data.num_nodes, parts, seed))
    g = torch.Generator().manual_seed((seed if p.sample_seed is None else p.sample_seed) * 7919 + 17)
    clients = []
    for k in range(parts):
        nodes = (membership == k).nonzero().view(-1)
        take = max(1, int(nodes.numel() * p.sample_fraction))
        for _ in range(p.samples_per_part):
            clients.append(nodes[torch.randperm(nodes.numel(), generator=g)[:take]].sort().values)
    return clients
