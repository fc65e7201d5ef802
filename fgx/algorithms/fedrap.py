"""FedRAP (Li et al., ICLR 2024): additive personalisation of item embeddings on client user-item
subgraphs. Each item has a global *commonality* row C_i (shared through the server, averaged) and a
local *personality* row D_i (never sent); a user scores ŷ_ui = σ(w_u · (D_i + C_i) + b_u). Locally the
client minimises

    BCE(ŷ, y) over positives and sampled negatives  −  λ_t · MSE(D, C)  +  μ_t · mean|C|      (batch rows)

so D is pushed away from C (the two parts carry different information) and C is kept sparse (FedRAP's
communication saving), with λ_t = tanh(t/10)·λ and μ_t = tanh(t/10)·μ warming up over rounds t = 0, 1, ...
(the code's default ``vary_param=tanh``). The server averages the clients' C rows per item, as FedMF
averages item updates (every client starts the round from the same global rows, so the mean update
equals FedRAP's mean of the uploaded C); the share of |C| entries ≤ 1e-4 is recorded as FedRAP's
sparsity (``fedrap_sparsity.jsonl``).

Checked against the authors' code (mtics/FedRAP, ``model/model.py``, ``model/loss.py``,
``model/engine.py``): additive D + C into one linear output (the user's ``affine_output``) with a
sigmoid and BCELoss; the signs of the λ (independence, subtracted) and μ (L1 on C, added) terms;
λ/μ's tanh schedule; aggregation of ``item_commonality`` only, ``item_personality`` and the output
layer deleted from the upload.

Adapted to fgx's subgraph clients (the spec is silent; fgx decisions): FedRAP's client is one user,
who owns a personality table D and an output layer (w, b). Here a client is an organisation: its users
keep FedRAP's per-user output layer as a user vector w_u and bias b_u, and the personality table D is
the client's, shared by its users (one D per user would be an [N, dim] table per user). The client
holds and uploads only the C rows of its items. The code's SGD (lr 0.5 for the output layer, 200 for
the item tables) is tuned for one-user clients whose losses are means over their own few pairs; fgx
uses Adam at one learning rate like its other MF baselines (``optimizer=sgd`` is available), with the
code's weight decay on every parameter (``l2``, code 1e-4) and its learning-rate decays: × 0.97 per round
(``round_decay``) and an exponential decay per step restarting each round (``step_decay``; the code's
0.95 per batch of a one-user client, fgx 0.99 per batch of an organisation's ~20 batches per epoch).
The −λ·MSE(D, C) term is unbounded below: without the decays, Adam moves D away from C at a constant
rate and the loss diverges (seed 0 on ML-100K: −62 at round 40, validation NDCG@20 0.217 at round 5,
0.108 at round 40)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from fgx.algorithms.fedmf import FedMF, ItemClient, ItemSharingParams
from fgx.config import spec
from fgx.recsys.bipartite import client_interactions
from fgx.recsys.training import sample_negatives
from fgx.registry import ALGORITHMS

SPARSE_BELOW = 1e-4     # FedRAP's sparsity: share of |C| entries not above this


@dataclass
class FedRAPParams(ItemSharingParams):
    num_negatives: int = field(default=4, metadata=spec(min=1, help="sampled negatives per positive (code: 4)"))
    lambda_: float = field(default=0.1, metadata=spec(min=0.0, help="λ: weight of -MSE(D, C) (independence of D and C)"))
    mu: float = field(default=0.1, metadata=spec(min=0.0, help="μ: weight of the L1 norm of C (sparsity)"))
    schedule: str = field(default="tanh", metadata=spec(
        choices=["tanh", "fixed"], help="tanh: λ, μ scaled by tanh(t/10) in round t = 0, 1, ... (code default); "
                                        "fixed: constant"))
    round_decay: float = field(default=0.97, metadata=spec(
        gt=0.0, max=1.0, help="learning rate × round_decay^(t-1) in round t (code decay_rate 0.97)"))
    step_decay: float = field(default=0.99, metadata=spec(
        gt=0.0, max=1.0, help="learning rate × step_decay per step within a round, restarting each round (code: "
                              "ExponentialLR 0.95 per batch of a one-user client)"))


class FedRAPModel(nn.Module):
    """User output layers (w_u, b_u), the client's personality table D and the global rows C
    (``item_emb``: the table FedMF's machinery shares)."""

    def __init__(self, dim: int, std: float, num_users: int, num_items: int):
        super().__init__()
        self.num_users, self.num_items = num_users, num_items
        self.user_emb = nn.Embedding(num_users, dim)
        self.user_bias = nn.Parameter(torch.zeros(num_users))
        self.item_personal = nn.Embedding(num_items, dim)
        self.item_emb = nn.Embedding(num_items, dim)
        for e in (self.user_emb, self.item_personal, self.item_emb):
            nn.init.normal_(e.weight, std=std)

    def logits(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        v = self.item_personal(items) + self.item_emb(items)
        return (self.user_emb(users) * v).sum(-1) + self.user_bias[users]

    def scores(self) -> torch.Tensor:
        return self.user_emb.weight @ (self.item_personal.weight + self.item_emb.weight).T + self.user_bias[:, None]


def weights_at(p: FedRAPParams, r: int) -> tuple[float, float]:
    """(λ_t, μ_t) of round r (1-based in fgx; the code counts from 0)."""
    s = math.tanh((r - 1) / 10) if p.schedule == "tanh" else 1.0
    return s * p.lambda_, s * p.mu


def fedrap_terms(model: FedRAPModel, u, i, j, lam: float, mu: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(BCE over positives and negatives, the regulariser −λ·MSE(D, C) + μ·mean|C| on the batch's rows)."""
    pos, neg = model.logits(u, i), model.logits(u[:, None].expand_as(j), j)
    logits = torch.cat([pos, neg.reshape(-1)])
    labels = torch.cat([torch.ones_like(pos), torch.zeros(neg.numel())])
    items = torch.cat([i, j.reshape(-1)])
    d, c = model.item_personal(items), model.item_emb(items)
    return F.binary_cross_entropy_with_logits(logits, labels), -lam * F.mse_loss(d, c) + mu * c.abs().mean()


def fedrap_loss(model: FedRAPModel, u, i, j, lam: float, mu: float) -> torch.Tensor:
    bce, reg = fedrap_terms(model, u, i, j, lam, mu)
    return bce + reg


def fedrap_train(state: ItemClient, p: FedRAPParams, seed: int, r: int) -> float:
    start = state.model.item_emb.weight.detach().clone()
    g = torch.Generator().manual_seed(seed + state.cid)
    lam, mu = weights_at(p, r)
    tr, model = state.inter.train, state.model
    base_lr = p.lr * p.round_decay ** (r - 1)
    for group in state.optimizer.param_groups:
        group["lr"] = base_lr
    decay = torch.optim.lr_scheduler.ExponentialLR(state.optimizer, gamma=p.step_decay)
    model.train()
    total, steps, reg_abs, all_abs = 0.0, 0, 0.0, 0.0
    for _ in range(p.local_epochs):
        perm = torch.randperm(tr.size(1), generator=g)
        neg_all = sample_negatives(state.known, tr[0], p.num_negatives, g)
        for b in torch.split(perm, p.batch_size):
            bce, reg = fedrap_terms(model, tr[0, b], tr[1, b], neg_all[b], lam, mu)
            loss = bce + reg
            r_, b_ = abs(float(reg.detach())), abs(float(bce.detach()))
            reg_abs, all_abs = reg_abs + r_, all_abs + b_ + r_
            state.optimizer.zero_grad()
            loss.backward()
            state.optimizer.step()
            decay.step()
            total += float(loss.detach())
            steps += 1
    state.delta = model.item_emb.weight.detach() - start
    state.reg_share = reg_abs / max(all_abs, 1e-30)     # |−λ·MSE(D, C) + μ·mean|C|| over |BCE| + that
    return total / max(steps, 1)


@ALGORITHMS.register("fedrap", params=FedRAPParams, tasks=("ranking",))
class FedRAP(FedMF):
    messages = dict(FedMF.messages)       # C rows up and down; D and (w_u, b_u) have no message kind
    model_names = ("mf",)

    def build_client(self, c) -> ItemClient:
        inter = client_interactions(c, self.ctx.global_data.num_users)
        torch.manual_seed(self.ctx.seed * 7919 + c.cid)
        mp = self.ctx.model_params
        model = FedRAPModel(mp.dim, mp.emb_init_std, inter.num_users, inter.num_items)
        p = self.params
        # weight decay on every parameter, as the code's SGD(weight_decay=l2_regularization)
        opt = (torch.optim.SGD if p.optimizer == "sgd" else torch.optim.Adam)(model.parameters(), lr=p.lr, weight_decay=p.l2)
        return ItemClient(c.cid, inter, model, opt)

    def train_round(self, r: int) -> list[float]:
        return self.ctx.executor.map(fedrap_train, self.clients, self.params, self.round_seed(r), r)

    def round_stats(self) -> dict[str, float]:
        return {"regulariser_share": float(sum(c.reg_share for c in self.clients) / len(self.clients))}

    def after_round(self, r: int) -> None:
        c = self.items[self.held]
        self.ctx.record("fedrap_sparsity", {"sparsity": float((c.abs() <= SPARSE_BELOW).float().mean()),
                                            "lambda": weights_at(self.params, r)[0], "mu": weights_at(self.params, r)[1]})
