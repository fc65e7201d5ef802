"""FedStar's two-channel GIN (Tan et al., AAAI 2023; yuetan031/FedStar ``GIN_dc``), for the graph task.

A structure channel embeds each node's structural encoding (``view.stc_enc``: random-walk landing
probabilities and a one-hot degree, fgx/algorithms/fedstar.py) and runs GCN layers with tanh; a
feature channel runs GIN layers on the node features concatenated with the structure channel's
state. Both meet in a linear layer, are add-pooled per graph and go through the MLP head. FedStar
shares the structure channel (``structure_prefixes``) and keeps the feature channel per client.

Layer-wise contract: the state ``h`` is the two channels side by side ([x, s], 2 x hidden wide)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from fgx.config import spec
from fgx.models.base import dropout
from fgx.models.graph_pool import GraphGNN, GraphGNNParams
from fgx.registry import MODELS


@dataclass
class GinDcParams(GraphGNNParams):
    n_rw: int = field(default=16, metadata=spec(min=1, help="random-walk steps of the structural encoding (FedStar: 16)"))
    n_dg: int = field(default=16, metadata=spec(min=1, help="degrees one-hot encoded, capped (FedStar: 16)"))


class GinDc(GraphGNN):
    def __init__(self, p: GinDcParams, in_dim: int, out_dim: int):
        from torch_geometric.nn import GCNConv, GINConv

        h = p.hidden
        convs = [GINConv(nn.Sequential(nn.Linear(2 * h, h), nn.ReLU(), nn.Linear(h, h))) for _ in range(p.layers)]
        super().__init__(p, in_dim, out_dim, convs)
        self.embedding_s = nn.Linear(p.n_rw + p.n_dg, h)
        self.convs_s = nn.ModuleList([GCNConv(h, h) for _ in range(p.layers)])
        self.Whp = nn.Linear(2 * h, h)
        self.hidden = h

    def structure_prefixes(self) -> list[str]:
        return ["embedding_s.", "convs_s."]

    def encode(self, view) -> dict:
        return {"h": torch.cat([self.pre(view.x), self.embedding_s(view.stc_enc)], -1), "e": None}

    def layer(self, i: int, h: torch.Tensor, e, edge_index: torch.Tensor):
        s = h[:, self.hidden:]
        return torch.cat([self.convs[i](h, edge_index), self.convs_s[i](s, edge_index)], -1), e

    def activate(self, i: int, pre: torch.Tensor) -> torch.Tensor:
        x, s = pre[:, :self.hidden], pre[:, self.hidden:]
        return torch.cat([dropout(torch.relu(x), self.dropout, self.training), torch.tanh(s)], -1)

    def head(self, h: torch.Tensor, e, edge_index: torch.Tensor, view) -> torch.Tensor:
        return super().head(self.Whp(h), e, edge_index, view)


@MODELS.register("gin_dc", params=GinDcParams, tasks=("graph",))
def build_gin_dc(p: GinDcParams, in_dim: int, out_dim: int, info) -> GinDc:
    return GinDc(p, in_dim, out_dim)
