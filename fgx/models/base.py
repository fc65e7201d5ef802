"""Shared shape of fgx's node GNNs: a stack of PyG convolutions with ReLU and dropout, the last
layer producing class logits. ``forward(data)`` reads ``data.x`` and ``data.edge_index``.

``layer_forward(i, h, edge_index)`` runs one layer (pre-activation), so algorithms that exchange
embeddings between clients (CE-FedGNN) can run the network layer by layer."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from fgx.config import spec


@dataclass
class GNNParams:
    layers: int = field(default=2, metadata=spec(min=1))
    hidden: int = field(default=64, metadata=spec(min=1))
    dropout: float = field(default=0.5, metadata=spec(min=0.0, max=1.0))


class NodeGNN(nn.Module):
    def __init__(self, convs: list[nn.Module], dropout: float):
        super().__init__()
        self.convs = nn.ModuleList(convs)
        self.dropout = dropout

    @property
    def num_layers(self) -> int:
        return len(self.convs)

    def layer_forward(self, i: int, h: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        if i > 0:
            h = torch.relu(h)
        h = nn.functional.dropout(h, self.dropout, self.training)
        return self.convs[i](h, edge_index)

    def forward(self, data) -> torch.Tensor:
        h = data.x
        for i in range(self.num_layers):
            h = self.layer_forward(i, h, data.edge_index)
        return h


def dims(p: GNNParams, in_dim: int, out_dim: int) -> list[tuple[int, int]]:
    sizes = [in_dim] + [p.hidden] * (p.layers - 1) + [out_dim]
    return list(zip(sizes[:-1], sizes[1:]))
