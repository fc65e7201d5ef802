"""LGCN (Yu et al., AAAI 2022) as LPSFed's client model: ID embeddings propagated by a low-pass
spectral convolution Z_l = P̄ diag(k̄_l) P̄ᵀ Z_{l-1} (Eq. 3) over the client's Φ lowest Laplacian
eigenvectors P̄, layers merged by a pooling MLP (Eq. 4). Scores are cosines of the pooled,
L2-normalised user and item vectors (the BC-Loss/LPSFed code's training score; spec 2.1 option
``cosine``). Popularity encoders (bucket embeddings) feed LPSFed's margin and stay local.

The model is built per client (it needs the client's sizes and eigenvectors), so the ranking
algorithms construct it with ``LGCN(params, num_users, num_items, eigvecs, user_deg, item_deg)``;
the registry entry gives ``fgx list`` and config validation its parameters."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from fgx.config import spec
from fgx.registry import MODELS

# popularity buckets of the reference code's get_pop_index: degree <=10, <=20, ..., >500
POP_THRESHOLDS = torch.tensor([10, 20, 30, 40, 50, 100, 200, 300, 400, 500])


@dataclass
class LGCNParams:
    dim: int = field(default=64, metadata=spec(min=1, help="embedding size D"))
    layers: int = field(default=2, metadata=spec(min=0, help="low-pass convolution layers L"))
    frequency: int = field(default=64, metadata=spec(min=1, help="cut-off Φ: eigenvectors kept"))
    pool_layers: int = field(default=2, metadata=spec(choices=[1, 2]))
    emb_init_std: float = field(default=0.1, metadata=spec(gt=0.0))
    bias_dim: int = field(default=64, metadata=spec(min=1, help="popularity encoder size d"))


def pop_bucket(deg: torch.Tensor) -> torch.Tensor:
    return torch.bucketize(deg, POP_THRESHOLDS)


class LGCN(nn.Module):
    def __init__(self, p: LGCNParams, num_users: int, num_items: int, eigvecs: torch.Tensor,
                 user_deg: torch.Tensor, item_deg: torch.Tensor):
        super().__init__()
        self.num_users, self.num_items = num_users, num_items
        self.register_buffer("eigvecs", eigvecs.float())         # [M+N, Φ'], Φ' = min(Φ, M+N)
        self.register_buffer("user_bucket", pop_bucket(user_deg))
        self.register_buffer("item_bucket", pop_bucket(item_deg))
        n, phi = eigvecs.shape
        self.emb = nn.Parameter(torch.randn(n, p.dim) * p.emb_init_std)
        self.kernels = nn.Parameter(torch.randn(p.layers, phi) * 0.02 + 0.01)
        d_in = (p.layers + 1) * p.dim
        self.pool = nn.Sequential(nn.Linear(d_in, p.dim), nn.ReLU(), nn.Linear(p.dim, p.dim)) \
            if p.pool_layers == 2 else nn.Linear(d_in, p.dim)
        nb = len(POP_THRESHOLDS) + 1
        self.user_pop = nn.Embedding(nb, p.bias_dim)
        self.item_pop = nn.Embedding(nb, p.bias_dim)
        nn.init.normal_(self.user_pop.weight, std=0.1)
        nn.init.normal_(self.item_pop.weight, std=0.1)

    def shared_keys(self) -> list[str]:
        """Parameters LPSFed/FedAvg share: the pooling network (spec 2.7)."""
        return [k for k in self.state_dict() if k.startswith("pool.")]

    def embed(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Pooled, L2-normalised user [M, D] and item [N, D] vectors."""
        z = self.emb
        layers = [z]
        for k in self.kernels:
            z = self.eigvecs @ (k[:, None] * (self.eigvecs.T @ z))
            layers.append(z)
        h = F.normalize(torch.tanh(self.pool(torch.cat(layers, 1))), dim=1)
        return h[: self.num_users], h[self.num_users:]

    def pop_cos(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        """cos ξ̂_ui between the popularity encodings of the pairs (any matching shapes). Computed
        on the small bucket-by-bucket cosine table and gathered: gather's backward (scatter_add)
        is far cheaper on CPU than the embedding lookups' for thousands of repeated indices."""
        table = F.normalize(self.user_pop.weight, dim=1) @ F.normalize(self.item_pop.weight, dim=1).T
        idx = self.user_bucket[users] * table.size(1) + self.item_bucket[items]
        return table.reshape(-1).gather(0, idx.reshape(-1)).view(idx.shape)

    def scores(self) -> torch.Tensor:
        u, v = self.embed()
        return u @ v.T


@MODELS.register("lgcn", params=LGCNParams, tasks=("ranking",))
def build_lgcn(p: LGCNParams, in_dim: int, out_dim: int, info):
    from fgx.config import ConfigError
    raise ConfigError("model", "lgcn", "an algorithm that builds per-client ranking models "
                      "(lpsfed, fedavg_lgcn, local_lgcn presets); lgcn needs each client's eigenvectors")
