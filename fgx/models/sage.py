"""GraphSAGE (mean aggregator) with PyG's SAGEConv layers (their parameters, names and initialisation).

Each layer computes what ``SAGEConv(aggr="mean")`` computes, lin_l(mean of in-neighbours' h) + lin_r(h),
as M·(h W_lᵀ) + b_l + h W_rᵀ: the linear map commutes with the mean, so it runs on the narrow side, M
(fgx.models.sparse.mean_adjacency) is built once per graph, and sparse raw features are multiplied as
CSR (the same reasons as fgx.models.gcn)."""
from __future__ import annotations

import torch

from fgx.models import sparse
from fgx.models.base import GNNParams, NodeGNN, dims, dropout, node_gnn
from fgx.registry import MODELS


def sage_layer(conv, h: torch.Tensor, edge_index: torch.Tensor, raw_input: bool = False) -> torch.Tensor:
    """``conv(h, edge_index)`` for a mean-aggregating SAGEConv ``conv``; ``raw_input``: h is the graph's own
    features (constant, maybe sparse: sparse.linear keeps a CSR copy), not a fresh activation."""
    lin = sparse.linear if raw_input else torch.nn.functional.linear
    mean = sparse.propagate(sparse.mean_adjacency(edge_index, h.size(0)), lin(h, conv.lin_l.weight))
    return mean + conv.lin_l.bias + lin(h, conv.lin_r.weight)


class SAGE(NodeGNN):
    in_edge_local = True        # the mean over in-neighbours (fgx.inference chunks it)

    def layer(self, i: int, h, e, edge_index):
        if i > 0 or self.input_dropout:
            h = dropout(h, self.dropout, self.training)
        return sage_layer(self.convs[i], h, edge_index, raw_input=i == 0 and not self.input_dropout), e


@MODELS.register("sage", params=GNNParams, tasks=("node", "link"))
def build_sage(p: GNNParams, in_dim: int, out_dim: int, info) -> NodeGNN:
    from torch_geometric.nn import SAGEConv

    return node_gnn(p, [SAGEConv(a, b) for a, b in dims(p, in_dim, out_dim)], out_dim, SAGE)
