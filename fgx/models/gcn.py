"""GCN (Kipf & Welling) from PyG's GCNConv."""
from __future__ import annotations

from fgx.models.base import GNNParams, NodeGNN, dims, node_gnn
from fgx.registry import MODELS


@MODELS.register("gcn", params=GNNParams, tasks=("node",))
def build_gcn(p: GNNParams, in_dim: int, out_dim: int, info) -> NodeGNN:
    from torch_geometric.nn import GCNConv

    return node_gnn(p, [GCNConv(a, b, cached=False) for a, b in dims(p, in_dim, out_dim)], out_dim)
