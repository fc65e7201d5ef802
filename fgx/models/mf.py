"""Matrix factorisation (Koren et al. 2009) for top-K ranking: a user and an item embedding table,
score = dot product. The FedMF/pFedRec backbone (``model=mf``).

Like ``lgcn``, the model is built per client by the ranking algorithms (``fedmf``, ``pfedrec``):
it needs the client's user and item counts, which only exist after partitioning, so
``ctx.build_model()`` refuses it and the algorithms call ``build_mf.per_client(params, inter)``."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from fgx.config import spec
from fgx.registry import MODELS


@dataclass
class MFParams:
    dim: int = field(default=64, metadata=spec(min=1, help="embedding size D"))
    emb_init_std: float = field(default=0.1, metadata=spec(gt=0.0))


class RankingEmbeddings(nn.Module):
    """User and item ID tables; subclasses define how they become final vectors (``embed``).
    ``item_emb`` is what federated recommenders share; ``user_emb`` never leaves a client."""

    def __init__(self, dim: int, std: float, num_users: int, num_items: int):
        super().__init__()
        self.num_users, self.num_items = num_users, num_items
        self.user_emb = nn.Embedding(num_users, dim)
        self.item_emb = nn.Embedding(num_items, dim)
        nn.init.normal_(self.user_emb.weight, std=std)
        nn.init.normal_(self.item_emb.weight, std=std)

    def embed(self) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def scores(self) -> torch.Tensor:
        u, v = self.embed()
        return u @ v.T


class MF(RankingEmbeddings):
    def __init__(self, p: MFParams, num_users: int, num_items: int, train: torch.Tensor | None = None):
        super().__init__(p.dim, p.emb_init_std, num_users, num_items)

    def embed(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.user_emb.weight, self.item_emb.weight


def per_client_refusal(name: str):
    from fgx.config import ConfigError
    raise ConfigError("model", name, "a ranking algorithm that builds per-client models "
                      "(fedmf, pfedrec); the model needs each client's user and item counts")


@MODELS.register("mf", params=MFParams, tasks=("ranking",))
def build_mf(p: MFParams, in_dim: int, out_dim: int, info):
    per_client_refusal("mf")


build_mf.per_client = lambda p, inter: MF(p, inter.num_users, inter.num_items)
