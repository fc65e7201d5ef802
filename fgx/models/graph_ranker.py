"""What LPSFed's client models (``lgcn``, ``ngcf``) share around their propagation (spec lpsfed.md 2.1):
ID embeddings Z0, L propagated layers merged by a pooling MLP (Eq. 4), a score, and the popularity
encoders that LPSFed's margin uses (local, never shared).

Scores. ``score: mlp_angle`` (paper, Eq. 5; default): a predictive MLP f_Pred on [U_u, V_i, U_u ⊙ V_i]
gives an unbounded value s_ui, the preference angle is R̂_ui = arccos(tanh(s_ui)) ∈ [0, π] and items are
ranked by ascending angle. ``score: cosine`` (what the authors' code trains with): R̂_ui is the angle
between the pooled, L2-normalised user and item vectors. Either way the model hands out cos R̂_ui
(tanh(s_ui), or the cosine), so losses that work on cosines (BC, BPR) and the ranking (descending cos R̂
= ascending angle) are the same code for both. The pooling MLP and, with ``mlp_angle``, θ_Pred are the
networks LPSFed's clients share (``shared_keys``)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from fgx.config import spec

# popularity buckets of the reference code's get_pop_index: degree <=10, <=20, ..., >500
POP_THRESHOLDS = torch.tensor([10, 20, 30, 40, 50, 100, 200, 300, 400, 500])
SCORES = ["mlp_angle", "cosine"]
# f_Pred's hidden activations held at once when it scores every (user, item) pair of a client: users are
# taken in blocks of at most this many (block x hidden x items) values (4 MB: measured fastest on CPU)
PRED_BLOCK = 1 << 20


@dataclass
class GraphRankerParams:
    dim: int = field(default=64, metadata=spec(min=1, help="embedding size D"))
    layers: int = field(default=2, metadata=spec(min=0, help="propagation layers L"))
    pool_layers: int = field(default=2, metadata=spec(choices=[1, 2], help="pooling MLP depth (paper 2; code 1)"))
    score: str = field(default="mlp_angle", metadata=spec(
        choices=SCORES, help="mlp_angle: Eq. 5 angle arccos(tanh(f_Pred([u, v, u*v]))) with a shared f_Pred "
                             "(paper); cosine: cosine of the pooled vectors (authors' training code)"))
    pred_layers: int = field(default=2, metadata=spec(choices=[1, 2], help="f_Pred depth (paper 2; code 1)"))
    emb_init_std: float = field(default=0.1, metadata=spec(gt=0.0))
    bias_dim: int = field(default=64, metadata=spec(min=1, help="popularity encoder size d"))


def pop_bucket(deg: torch.Tensor) -> torch.Tensor:
    return torch.bucketize(deg, POP_THRESHOLDS)


def mlp(d_in: int, d_hidden: int, d_out: int, layers: int) -> nn.Module:
    return nn.Sequential(nn.Linear(d_in, d_hidden), nn.ReLU(), nn.Linear(d_hidden, d_out)) if layers == 2 \
        else nn.Linear(d_in, d_out)


class GraphRanker(nn.Module):
    """Subclasses implement ``propagate(z0) -> [Z1..ZL]`` over the client graph."""

    shared_prefixes = ("pool.", "pred.")

    def __init__(self, p: GraphRankerParams, num_users: int, num_items: int, user_deg: torch.Tensor,
                 item_deg: torch.Tensor):
        super().__init__()
        self.num_users, self.num_items = num_users, num_items
        self.score_kind = p.score
        self.register_buffer("user_bucket", pop_bucket(user_deg))
        self.register_buffer("item_bucket", pop_bucket(item_deg))
        self.emb = nn.Parameter(torch.randn(num_users + num_items, p.dim) * p.emb_init_std)
        self.pool = mlp((p.layers + 1) * p.dim, p.dim, p.dim, p.pool_layers)
        self.pred = mlp(3 * p.dim, p.dim, 1, p.pred_layers) if p.score == "mlp_angle" else None
        nb = len(POP_THRESHOLDS) + 1
        self.user_pop = nn.Embedding(nb, p.bias_dim)
        self.item_pop = nn.Embedding(nb, p.bias_dim)
        nn.init.normal_(self.user_pop.weight, std=0.1)
        nn.init.normal_(self.item_pop.weight, std=0.1)

    def propagate(self, z0: torch.Tensor, eigvecs: torch.Tensor | None = None) -> list[torch.Tensor]:
        """[Z1..ZL] from Z0 over the client graph (``eigvecs``: another graph's, spectral models only)."""
        raise NotImplementedError

    def pooled(self, z0: torch.Tensor, layers: list[torch.Tensor]) -> torch.Tensor:
        """Eq. 4: tanh(pool([Z0 || Z1 || ... || ZL])), L2-normalised for the cosine score."""
        h = torch.tanh(self.pool(torch.cat([z0, *layers], 1)))
        return F.normalize(h, dim=1) if self.pred is None else h

    def forward(self, users: torch.Tensor | None = None, items: torch.Tensor | None = None,
                proxy: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """For ``torch.func.functional_call`` (FED-PUB's masked weights): cos R̂ of the (users, items)
        pairs, of every pair when they are None, or the pooled output on ``proxy`` = (Z0, eigvecs)."""
        if proxy is not None:
            z0, ev = proxy
            return self.pooled(z0, self.propagate(z0, ev))
        uh, vh = self.embed()
        return self.scores_from(uh, vh) if users is None else self.pair_cos(uh, vh, users, items)

    def shared_keys(self) -> list[str]:
        """Parameters LPSFed/FedAvg (LGCN) share: the pooling MLP and f_Pred (spec 2.7)."""
        return [k for k in self.state_dict() if k.startswith(self.shared_prefixes)]

    def embed(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Pooled user [M, D] and item [N, D] vectors (L2-normalised for the cosine score)."""
        h = self.pooled(self.emb, self.propagate(self.emb))
        return h[: self.num_users], h[self.num_users:]

    def pair_cos(self, uh: torch.Tensor, vh: torch.Tensor, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        """cos R̂_ui for index tensors of any matching shape (tanh(f_Pred) or the cosine)."""
        if self.pred is None:
            # all-pairs cosines then gather: cheaper on CPU than row lookups' backward
            flat = (uh @ vh.T).reshape(-1)
            return flat.gather(0, (users * vh.size(0) + items).reshape(-1)).view(users.shape)
        u, v = uh[users.reshape(-1)], vh[items.reshape(-1)]
        return torch.tanh(self.pred(torch.cat([u, v, u * v], 1)).squeeze(1)).view(users.shape)

    def scores(self) -> torch.Tensor:
        """cos R̂ for every (user, item) pair [M, N]: higher = smaller angle = recommended first."""
        return self.scores_from(*self.embed())

    def scores_from(self, uh: torch.Tensor, vh: torch.Tensor) -> torch.Tensor:
        if self.pred is None:
            return uh @ vh.T
        return pred_all_pairs(self.pred, uh, vh)

    def pop_cos(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        """cos ξ̂_ui between the popularity encodings of the pairs (any matching shapes). Computed
        on the small bucket-by-bucket cosine table and gathered: gather's backward (scatter_add)
        is far cheaper on CPU than the embedding lookups' for thousands of repeated indices."""
        table = F.normalize(self.user_pop.weight, dim=1) @ F.normalize(self.item_pop.weight, dim=1).T
        idx = self.user_bucket[users] * table.size(1) + self.item_bucket[items]
        return table.reshape(-1).gather(0, idx.reshape(-1)).view(idx.shape)


def pred_all_pairs(pred: nn.Module, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """tanh(f_Pred([u, v, u*v])) for every (user, item) pair [M, N], without a loop per user or a tensor
    per pair. f_Pred's first layer splits into a user part a_u, an item part b_v and the product part
    W3 (u*v) = (u*W3[k]) . v per hidden unit k: for a block of users the product part of every pair is
    one matrix product [(block x K), D] @ [D, N], then a_u, b_v and the bias are added, ReLU and the
    second layer reduce over K. The same function as the per-pair MLP (up to float summation order)."""
    first = pred[0] if isinstance(pred, nn.Sequential) else pred
    d = u.size(1)
    w = first.weight                                   # [K, 3D]
    k = w.size(0)
    a = u @ w[:, :d].T + first.bias                    # [M, K]
    b = (v @ w[:, d:2 * d].T).T                        # [K, N]
    w3, vt = w[:, 2 * d:], v.T.contiguous()
    out = []
    step = max(1, PRED_BLOCK // max(1, k * v.size(0)))
    two = isinstance(pred, nn.Sequential)
    for s in range(0, u.size(0), step):
        uc = u[s:s + step]
        h = ((uc[:, None, :] * w3[None]).reshape(-1, d) @ vt).view(uc.size(0), k, -1)
        if torch.is_grad_enabled():
            h = h + a[s:s + step, :, None] + b[None]
            h = torch.relu(h) if two else h
        else:                                          # evaluation: in place, no copies of the block
            h += a[s:s + step, :, None]
            h += b[None]
            if two:
                h.relu_()
        if two:                                        # the second layer's weighted sum over K
            out.append(torch.matmul(pred[2].weight.view(1, -1), h).squeeze(1) + pred[2].bias)
        else:                                          # one layer: K = 1
            out.append(h.squeeze(1))
    return torch.tanh(torch.cat(out)) if out else torch.empty(0, v.size(0), dtype=u.dtype, device=u.device)


def graph_ranker_refusal(name: str):
    from fgx.config import ConfigError
    raise ConfigError("model", name, "an algorithm that builds per-client ranking models "
                      "(lpsfed and its presets, fedpub, fedssp); the model needs each client's graph")
