"""MLP on tabular rows (Bellet et al. 2025: one hidden layer of 64, ReLU, linear output)."""
from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn

from fgx.config import spec
from fgx.registry import MODELS


@dataclass
class MLPTabularParams:
    hidden: int = field(default=64, metadata=spec(min=1))


@MODELS.register("mlp_tabular", params=MLPTabularParams, tasks=("regression",))
def build(p: MLPTabularParams, in_dim: int, out_dim: int, info) -> nn.Module:
    return nn.Sequential(nn.Linear(in_dim, p.hidden), nn.ReLU(), nn.Linear(p.hidden, out_dim))
