"""GIN (Xu et al.) from PyG's GINConv with a two-layer MLP per layer."""
from __future__ import annotations

from torch import nn
from fgx.models.base import GNNParams, NodeGNN, dims, node_gnn
from fgx.registry import MODELS


@MODELS.register("gin", params=GNNParams, tasks=("node", "link"))
def build_gin(p: GNNParams, in_dim: int, out_dim: int, info) -> NodeGNN:
    from torch_geometric.nn import GINConv

    convs = [GINConv(nn.Sequential(nn.Linear(a, p.hidden), nn.ReLU(), nn.Linear(p.hidden, b)), train_eps=True)
             for a, b in dims(p, in_dim, out_dim)]
    model = node_gnn(p, convs, out_dim)
    model.in_edge_local = True  # the sum over in-neighbours (fgx.inference chunks it)
    return model
