"""Multi-GNN-style edge classifiers (Egressy et al., AAAI 2024) and GINe.

Per layer: ``h = (h + relu(BN(conv(h, e)))) / 2`` (residual + batch norm), then the edge update
``e = e + EMLP([h_src, h_dst, e]) / 2``; optional reverse message passing (a second convolution
over the reversed edges, averaged with the forward one). Node inputs get an ego-ID bit (1 for the
endpoints of the view's seed edges); edge inputs are the dataset's edge features, with in/out port
numbers when the dataset provides them. Readout on ``[relu(h_u), relu(h_v), e]``."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from fgx.config import spec
from fgx.data.aml.features import PORT_FEATURES
from fgx.models.base import LayerwiseModel
from fgx.registry import MODELS

# Multi-GNN's tuned class weights for class-weighted cross-entropy (model_settings.json)
MULTIGNN_CLASS_WEIGHTS = {"gine": [1.0000183, 6.2750144], "pna": [1.0003968, 7.0776335]}


def class_weights(model_name: str) -> torch.Tensor:
    """Multi-GNN's cross-entropy class weights [licit, illicit] for ``gine`` or ``pna``."""
    return torch.tensor(MULTIGNN_CLASS_WEIGHTS[model_name])


@dataclass
class EdgeGNNParams:
    layers: int = field(default=2, metadata=spec(min=1))
    hidden: int = field(default=66, metadata=spec(min=1))
    dropout: float = field(default=0.0098, metadata=spec(min=0.0, max=1.0))
    final_dropout: float = field(default=0.1053, metadata=spec(min=0.0, max=1.0))
    edge_updates: bool = True
    reverse_mp: bool = False
    ego_ids: bool = True
    ports: bool = field(default=True, metadata=spec(help="use the dataset's port-number edge features"))


def edge_columns(info, use_ports: bool) -> list[int]:
    names = info.extra.get("edge_features")
    if not names:
        raise ValueError(f"dataset {info.name} has no info.extra['edge_features']: not an edge-feature dataset")
    return [i for i, n in enumerate(names) if use_ports or n not in PORT_FEATURES]


def ego_column(view) -> torch.Tensor:
    """1 for endpoints of the seed edges (``view.seed_edge_mask``; all edges when absent)."""
    ego = torch.zeros(view.num_nodes, 1, device=view.x.device)
    ei = view.edge_index
    seed = getattr(view, "seed_edge_mask", None)
    if seed is not None:
        ei = ei[:, seed]
    ego[ei.reshape(-1)] = 1.0
    return ego


def readout(hidden: int, dropout: float, out_dim: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(3 * hidden, 50), nn.ReLU(), nn.Dropout(dropout),
                         nn.Linear(50, 25), nn.ReLU(), nn.Dropout(dropout), nn.Linear(25, out_dim))


class EdgeGNN(LayerwiseModel):
    def __init__(self, p: EdgeGNNParams, in_dim: int, out_dim: int, edge_cols: list[int], make_conv, hidden: int):
        super().__init__()
        self.p = p
        self.edge_cols = edge_cols
        self.node_emb = nn.Linear(in_dim + int(p.ego_ids), hidden)
        self.edge_emb = nn.Linear(len(edge_cols), hidden)
        self.convs = nn.ModuleList([make_conv() for _ in range(p.layers)])
        self.rev_convs = nn.ModuleList([make_conv() for _ in range(p.layers)]) if p.reverse_mp else None
        # in-edge aggregation (GINE, PNA) and per-edge updates: layer outputs can be trimmed exactly
        # (LayerwiseModel.trim_exact); reverse message passing also reads a node's out-edges
        self.trim_exact = not p.reverse_mp
        self.bns = nn.ModuleList([nn.BatchNorm1d(hidden) for _ in range(p.layers)])
        self.emlps = nn.ModuleList([nn.Sequential(nn.Linear(3 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden))
                                    for _ in range(p.layers)]) if p.edge_updates else None
        self.head_mlp = readout(hidden, p.final_dropout, out_dim)

    @property
    def num_layers(self) -> int:
        return len(self.convs)

    def encode(self, view) -> dict:
        x = view.x
        if self.p.ego_ids:
            x = torch.cat([x, ego_column(view)], 1)
        return {"h": self.node_emb(x), "e": self.edge_emb(view.edge_attr[:, self.edge_cols])}

    def layer(self, i: int, h: torch.Tensor, e: torch.Tensor, edge_index: torch.Tensor,
              edge_out: int | None = None):
        """``edge_out``: return (and update) the features of the first ``edge_out`` edges only (the
        last layer's edge update matters only for the edges the readout scores)."""
        h = self.layer_nodes(i, h, e, edge_index)
        if edge_out is not None:
            edge_index, e = edge_index[:, :edge_out], e[:edge_out]
        return h, self.layer_edges(i, h, e, edge_index)

    # the two halves of ``layer`` (fgx.inference runs them in chunks: a node's new row needs its
    # in-edges only, an edge's update needs the new rows of its two endpoints)
    def layer_nodes(self, i: int, h: torch.Tensor, e: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        m = self.convs[i](h, edge_index, e)
        if self.rev_convs is not None:
            m = (m + self.rev_convs[i](h, edge_index.flip(0), e)) / 2
        h = (h + torch.relu(self.bns[i](m))) / 2
        return nn.functional.dropout(h, self.p.dropout, self.training)

    def layer_edges(self, i: int, h: torch.Tensor, e: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        """The edge update of layer ``i`` for the edges ``edge_index`` (features ``e``), from the new rows ``h``."""
        if self.emlps is None:
            return e
        src, dst = edge_index
        return e + self.emlps[i](torch.cat([h[src], h[dst], e], -1)) / 2

    def activate(self, i: int, pre: torch.Tensor) -> torch.Tensor:
        return pre

    def head(self, h: torch.Tensor, e: torch.Tensor, edge_index: torch.Tensor, view) -> torch.Tensor:
        src, dst = edge_index
        return self.head_mlp(torch.cat([torch.relu(h[src]), torch.relu(h[dst]), e], -1))


@MODELS.register("gine", params=EdgeGNNParams, tasks=("edge",))
def build_gine(p: EdgeGNNParams, in_dim: int, out_dim: int, info) -> EdgeGNN:
    from torch_geometric.nn import GINEConv

    h = p.hidden

    def conv():
        return GINEConv(nn.Sequential(nn.Linear(h, h), nn.ReLU(), nn.Linear(h, h)), edge_dim=h)

    return EdgeGNN(p, in_dim, out_dim, edge_columns(info, p.ports), conv, h)
