"""Everything an algorithm needs, in one object."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from fgx.data.base import DatasetInfo


@dataclass
class Context:
    clients: list
    info: DatasetInfo
    config: Any                   # the validated configuration (fgx.config.Validated: top, params, names)
    params: Any                   # this algorithm's params dataclass
    model_params: Any
    model_builder: Callable       # (params, in_dim, out_dim, info) -> nn.Module
    channel: Any
    executor: Any
    privacy: Any
    device: torch.device
    seed: int
    log: logging.Logger
    threat: Any = field(default_factory=lambda: _no_threat())        # the run's attack (fgx/threats), none by default
    aggregator: Any = field(default_factory=lambda: _mean())         # the server's rule over updates (fgx/federation/robust.py)
    global_data: Any = None       # the global graph: for evaluation/diagnostics only, never for training
    extras: dict = field(default_factory=dict)   # per-round records an algorithm wants written
    secure_aggregation: Any = None   # fgx/federation/secure.py: how the averaging server sums the updates (None: in clear)

    @property
    def rounds(self) -> int:
        return self.config.top.rounds

    @property
    def in_dim(self) -> int:
        return int(self.clients[0].data.x.size(-1))

    @property
    def out_dim(self) -> int:
        return max(self.info.num_classes, 1)

    def build_model(self) -> torch.nn.Module:
        torch.manual_seed(self.seed)   # every client and the server start from the same weights
        return self.model_builder(self.model_params, self.in_dim, self.out_dim, self.info).to(self.device)

    def record(self, name: str, value: Any) -> None:
        """Ask the trainer to write ``value`` to ``<name>.jsonl`` in the run directory this round."""
        self.extras.setdefault(name, []).append(value)


def _no_threat():
    from fgx.threats.base import NoThreat, NoThreatParams
    return NoThreat(NoThreatParams())


def _mean():
    from fgx.federation.robust import Mean, MeanParams
    return Mean(MeanParams())
