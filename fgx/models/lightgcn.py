"""LightGCN (He et al., SIGIR 2020) for top-K ranking: ID embeddings propagated K times over the
client's symmetrically normalised user-item adjacency D^-1/2 A D^-1/2, final vectors = the mean of
the K+1 layers, score = dot product. No feature transforms, no nonlinearity.

Built per client by the ranking algorithms (``fedmf``, ``pfedrec``) with the client's training
interactions: ``build_lightgcn.per_client(params, inter)``; ``ctx.build_model()`` refuses it."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fgx.config import spec
from fgx.models.mf import RankingEmbeddings, per_client_refusal
from fgx.registry import MODELS


@dataclass
class LightGCNParams:
    dim: int = field(default=64, metadata=spec(min=1, help="embedding size D"))
    layers: int = field(default=3, metadata=spec(min=0, help="propagation layers K"))
    emb_init_std: float = field(default=0.1, metadata=spec(gt=0.0))


def normalized_bipartite_adjacency(train: torch.Tensor, num_users: int, num_items: int) -> torch.Tensor:
    """Sparse D^-1/2 A D^-1/2 of the (M+N)-node bipartite graph of the (user, item) pairs ``train``.
    Built by hand rather than with PyG's gcn_norm: that adds self loops, LightGCN has none, and this
    module must not import torch_geometric at top level."""
    u, i = train[0], train[1] + num_users
    row, col = torch.cat([u, i]), torch.cat([i, u])
    n = num_users + num_items
    deg = torch.bincount(row, minlength=n).float()
    dinv = deg.pow(-0.5).masked_fill(deg == 0, 0.0)
    val = dinv[row] * dinv[col]
    return torch.sparse_coo_tensor(torch.stack([row, col]), val, (n, n)).coalesce()


class LightGCN(RankingEmbeddings):
    def __init__(self, p: LightGCNParams, num_users: int, num_items: int, train: torch.Tensor):
        super().__init__(p.dim, p.emb_init_std, num_users, num_items)
        self.layers = p.layers
        self.adj = normalized_bipartite_adjacency(train, num_users, num_items)

    def embed(self) -> tuple[torch.Tensor, torch.Tensor]:
        z = torch.cat([self.user_emb.weight, self.item_emb.weight])
        total = z
        for _ in range(self.layers):
            z = self.adj @ z
            total = total + z
        h = total / (self.layers + 1)
        return h[: self.num_users], h[self.num_users:]


@MODELS.register("lightgcn", params=LightGCNParams, tasks=("ranking",))
def build_lightgcn(p: LightGCNParams, in_dim: int, out_dim: int, info):
    per_client_refusal("lightgcn")


build_lightgcn.per_client = lambda p, inter: LightGCN(p, inter.num_users, inter.num_items, inter.train)
