"""GCN (Kipf & Welling) with PyG's GCNConv layers (their parameters, names and initialisation).

Each layer computes what ``GCNConv(normalize=True, cached=False)`` computes, Â·(h W) + b with
Â = D^-1/2 (A + I) D^-1/2 from PyG's ``gcn_norm``, but Â is built once per graph and sparse raw
features are multiplied as CSR (fgx.models.sparse): a client's graph and features are the same at
every step and every evaluation."""
from __future__ import annotations

import torch

from fgx.models import sparse
from fgx.models.base import GNNParams, NodeGNN, dims, dropout, node_gnn
from fgx.registry import MODELS


class GCN(NodeGNN):
    def layer(self, i: int, h, e, edge_index):
        if i > 0 or self.input_dropout:
            h = dropout(h, self.dropout, self.training)
        conv = self.convs[i]
        # the first layer's input is the graph's own (often bag-of-words) features: sparse.linear keeps
        # a CSR copy of them; hidden activations are new every call and dense
        lin = sparse.linear if i == 0 and not self.input_dropout else torch.nn.functional.linear
        out = sparse.propagate(sparse.gcn_adjacency(edge_index, h.size(0)), lin(h, conv.lin.weight))
        return (out + conv.bias if conv.bias is not None else out), e


@MODELS.register("gcn", params=GNNParams, tasks=("node", "link"))
def build_gcn(p: GNNParams, in_dim: int, out_dim: int, info) -> NodeGNN:
    from torch_geometric.nn import GCNConv

    return node_gnn(p, [GCNConv(a, b, cached=False) for a, b in dims(p, in_dim, out_dim)], out_dim, GCN)
