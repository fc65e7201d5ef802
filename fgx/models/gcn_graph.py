"""GCN graph classifier: PyG's GCNConv layers, global pooling, an MLP head (fgx/models/graph_pool.py)."""
from __future__ import annotations

from fgx.models.graph_pool import GraphGNN, GraphGNNParams
from fgx.registry import MODELS


@MODELS.register("gcn_graph", params=GraphGNNParams, tasks=("graph",))
def build_gcn_graph(p: GraphGNNParams, in_dim: int, out_dim: int, info) -> GraphGNN:
    from torch_geometric.nn import GCNConv

    return GraphGNN(p, in_dim, out_dim, [GCNConv(p.hidden, p.hidden) for _ in range(p.layers)])
