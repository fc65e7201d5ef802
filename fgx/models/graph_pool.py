"""Shared shape of fgx's graph classifiers (task ``graph``), the backbone of GCFL's and FedStar's code:
a linear input layer, message-passing layers (conv -> ReLU -> dropout), a global pooling of each
graph's nodes (add or mean), then an MLP head (Linear -> ReLU -> dropout -> Linear) to the classes.

It keeps the layer-wise contract (docs/ARCHITECTURE.md): ``encode`` is the input layer, ``layer`` /
``activate`` the convolutions, ``head`` the pooling and the MLP. ``forward(view)`` reads ``view.x``,
``view.edge_index``, ``view.graph`` (node -> graph) and ``view.graph_y`` (one entry per graph) and
returns logits [graphs, classes]. ``encoder_prefixes()`` names the message-passing layers, the part
GCFL's code shares between clients."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from fgx.config import spec
from fgx.models.base import LayerwiseModel, dropout


@dataclass
class GraphGNNParams:
    layers: int = field(default=3, metadata=spec(min=1, help="message-passing layers (GCFL/FedStar: 3)"))
    hidden: int = field(default=64, metadata=spec(min=1, help="width of every layer (GCFL/FedStar: 64)"))
    dropout: float = field(default=0.5, metadata=spec(min=0.0, max=1.0, help="after each layer and the head's hidden layer"))
    pooling: str = field(default="add", metadata=spec(choices=["add", "mean"], help="graph readout (GCFL/FedStar: add)"))


class GraphGNN(LayerwiseModel):
    def __init__(self, p: GraphGNNParams, in_dim: int, out_dim: int, convs: list[nn.Module]):
        super().__init__()
        self.pre = nn.Linear(in_dim, p.hidden)
        self.convs = nn.ModuleList(convs)
        self.post = nn.Linear(p.hidden, p.hidden)
        self.readout = nn.Linear(p.hidden, out_dim)
        self.dropout, self.pooling = p.dropout, p.pooling

    @property
    def num_layers(self) -> int:
        return len(self.convs)

    def encoder_prefixes(self) -> list[str]:
        return ["convs."]

    def encode(self, view) -> dict:
        """{"h": [n, hidden] the input layer on the nodes' features ``view.x`` [n, F], "e": None}."""
        return {"h": self.pre(view.x), "e": None}

    def layer(self, i: int, h: torch.Tensor, e, edge_index: torch.Tensor):
        """Layer ``i``'s convolution on node states ``h`` [n, hidden] over ``edge_index`` [2, E]: (pre-activation
        [n, hidden], e)."""
        return self.convs[i](h, edge_index), e

    def activate(self, i: int, pre: torch.Tensor) -> torch.Tensor:
        """dropout(ReLU(pre)) [n, hidden]."""
        return dropout(torch.relu(pre), self.dropout, self.training)

    def pool(self, h: torch.Tensor, view) -> torch.Tensor:
        from torch_geometric.nn import global_add_pool, global_mean_pool

        fn = global_add_pool if self.pooling == "add" else global_mean_pool
        return fn(h, view.graph, size=int(view.graph_y.numel()))

    def head(self, h: torch.Tensor, e, edge_index: torch.Tensor, view) -> torch.Tensor:
        """Graph logits [G, C]: the node states ``h`` [n, hidden] pooled per graph (``view.graph`` [n]: each
        node's graph), then post layer, ReLU, dropout and readout."""
        g = dropout(torch.relu(self.post(self.pool(h, view))), self.dropout, self.training)
        return self.readout(g)
