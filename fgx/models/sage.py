"""GraphSAGE (mean aggregator) from PyG's SAGEConv."""
from __future__ import annotations

from fgx.models.base import GNNParams, NodeGNN, dims, node_gnn
from fgx.registry import MODELS


@MODELS.register("sage", params=GNNParams, tasks=("node",))
def build_sage(p: GNNParams, in_dim: int, out_dim: int, info) -> NodeGNN:
    from torch_geometric.nn import SAGEConv

    return node_gnn(p, [SAGEConv(a, b) for a, b in dims(p, in_dim, out_dim)], out_dim)
