"""GIN graph classifier (Xu et al. 2019), the field's backbone for federated graph classification
(GCFL, FedStar, OpenFGL): GINConv with a two-layer MLP per layer, global pooling, an MLP head."""
from __future__ import annotations

from torch import nn

from fgx.models.graph_pool import GraphGNN, GraphGNNParams
from fgx.registry import MODELS


@MODELS.register("gin_graph", params=GraphGNNParams, tasks=("graph",))
def build_gin_graph(p: GraphGNNParams, in_dim: int, out_dim: int, info) -> GraphGNN:
    from torch_geometric.nn import GINConv

    convs = [GINConv(nn.Sequential(nn.Linear(p.hidden, p.hidden), nn.ReLU(), nn.Linear(p.hidden, p.hidden)))
             for _ in range(p.layers)]
    return GraphGNN(p, in_dim, out_dim, convs)
