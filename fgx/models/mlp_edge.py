"""Baseline that sees no graph: an MLP on each transaction's own features (ports excluded by
default, since port numbers are computed from the graph)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from fgx.config import spec
from fgx.models.gine import edge_columns
from fgx.registry import MODELS


@dataclass
class MLPEdgeParams:
    hidden: int = field(default=66, metadata=spec(min=1))
    layers: int = field(default=3, metadata=spec(min=1, help="linear layers"))
    dropout: float = field(default=0.1, metadata=spec(min=0.0, max=1.0))
    ports: bool = field(default=False, metadata=spec(help="also use the graph-derived port numbers"))


class EdgeMLP(nn.Module):
    """Zero message-passing layers: encode picks the edge features, head is the MLP."""

    def __init__(self, p: MLPEdgeParams, out_dim: int, edge_cols: list[int]):
        super().__init__()
        self.edge_cols = edge_cols
        sizes = [len(edge_cols)] + [p.hidden] * (p.layers - 1)
        mods: list[nn.Module] = []
        for a, b in zip(sizes[:-1], sizes[1:]):
            mods += [nn.Linear(a, b), nn.ReLU(), nn.Dropout(p.dropout)]
        mods.append(nn.Linear(sizes[-1], out_dim))
        self.mlp = nn.Sequential(*mods)

    num_layers = 0

    def encode(self, view) -> dict:
        return {"h": view.x, "e": view.edge_attr[:, self.edge_cols]}

    def layer(self, i, h, e, edge_index):
        raise IndexError("mlp_edge has no message-passing layers")

    def activate(self, i, pre):
        return pre

    def head(self, h: torch.Tensor, e: torch.Tensor, edge_index, view) -> torch.Tensor:
        return self.mlp(e)

    def forward(self, view) -> torch.Tensor:
        s = self.encode(view)
        return self.head(s["h"], s["e"], view.edge_index, view)


@MODELS.register("mlp_edge", params=MLPEdgeParams, tasks=("edge",))
def build_mlp_edge(p: MLPEdgeParams, in_dim: int, out_dim: int, info) -> EdgeMLP:
    return EdgeMLP(p, out_dim, edge_columns(info, p.ports))
