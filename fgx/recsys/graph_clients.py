"""Clients of the graph-ranker recommenders (LPSFed, FED-PUB and FedSSP on the ranking task): each
client's interactions re-indexed, its Φ lowest Laplacian eigenpairs (cached on disk), its ``lgcn``
or ``ngcf`` model and optimiser, plus the mini-batch BPR epochs and the full-ranking evaluation they
share. Everything here is client state: nothing in this module sends anything."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from fgx.config import ConfigError, default_data_dir, spec
from fgx.recsys import losses
from fgx.recsys.bipartite import client_interactions
from fgx.recsys.metrics import popularity_groups, ranking_metrics
from fgx.recsys.spectral import cached_eigenpairs
from fgx.recsys.training import sample_negatives

GRAPH_MODELS = ("lgcn", "ngcf")


@dataclass
class GraphTrainParams:
    """Local training of the graph-ranker clients (LPSFed's settings, shared by its baselines)."""
    lr: float = field(default=0.01, metadata=spec(gt=0.0))
    weight_decay: float = field(default=0.0, metadata=spec(min=0.0))
    optimizer: str = field(default="adam", metadata=spec(choices=["adam", "rmsprop", "sgd"]))
    local_epochs: int = field(default=5, metadata=spec(min=1, help="passes over the training pairs per round"))
    batch_size: int = field(default=4096, metadata=spec(min=1))
    num_negatives: int = field(default=4, metadata=spec(min=1))
    bpr_tau: float = field(default=1.0, metadata=spec(
        gt=0.0, help="BPR temperature on cos R̂: -log σ((s_ui - s_uj)/τ); 1.0 = standard BPR (paper: Rendle et al.; "
                     "authors' code); tuned like every BPR method's"))
    top_k: int = field(default=20, metadata=spec(min=1))


class GraphClient:
    """One client's interactions, model, optimiser and spectrum (what stays on the client)."""

    def __init__(self, cid, inter, model, optimizer, eigvals, eigvecs):
        self.cid, self.inter, self.model, self.optimizer = cid, inter, model, optimizer
        self.eigvals = eigvals            # first Φ Laplacian eigenvalues (never sent)
        self.eigvecs = eigvecs
        self.item_group = popularity_groups(inter.train[1], inter.num_items)
        self.known = torch.zeros(inter.num_users, inter.num_items, dtype=torch.bool)
        self.known[inter.train[0], inter.train[1]] = True


def require_graph_model(validated, algorithm: str) -> None:
    name = validated.names.get("model")
    if name not in GRAPH_MODELS:
        raise ConfigError("model", name, f"one of {', '.join(GRAPH_MODELS)} ({algorithm} runs on LPSFed's "
                                         f"graph rankers, built per client)")


def make_optimizer(name: str, params, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    cls = {"adam": torch.optim.Adam, "rmsprop": torch.optim.RMSprop, "sgd": torch.optim.SGD}[name]
    return cls(params, lr=lr, weight_decay=weight_decay)


def build_graph_clients(ctx, lr: float, weight_decay: float, optimizer: str = "adam",
                        build: Callable | None = None, client_cls: type = GraphClient) -> list[GraphClient]:
    """One GraphClient per core client. ``build(params, inter, spectrum)`` makes the model
    (default: the configured model's ``per_client``); models are seeded per client."""
    mp = ctx.model_params
    phi = mp.frequency
    # the data root may be shared and read-only: the eigenpairs go to fgx's own cache
    cache = Path(default_data_dir()) / "cache" / "lgcn_eig"
    build = build or ctx.model_builder.per_client
    out = []
    for c in ctx.clients:
        inter = client_interactions(c, ctx.global_data.num_users)
        tr = inter.train.numpy()
        w, v = cached_eigenpairs(tr[0], tr[1], inter.num_users, inter.num_items, phi, cache)
        torch.manual_seed(ctx.seed * 7919 + c.cid)
        model = build(mp, inter, (w, v))
        opt = make_optimizer(optimizer, model.parameters(), lr, weight_decay)
        out.append(client_cls(c.cid, inter, model, opt, w, v))
    return out


def pos_neg_cos(model, uh, vh, u, i, j) -> tuple[torch.Tensor, torch.Tensor]:
    """cos R̂ of the positives [B] and of the sampled negatives [B, J], in one scoring call."""
    users = u[:, None].expand(-1, 1 + j.size(1))
    both = model.pair_cos(uh, vh, users, torch.cat([i[:, None], j], 1))
    return both[:, 0], both[:, 1:]


def bpr_graph_epochs(state: GraphClient, epochs: int, batch_size: int, num_negatives: int, bpr_tau: float,
                     seed: int, regulariser: Callable | None = None) -> float:
    """Mini-batch BPR on (user, positive, sampled negatives) with the model's cos R̂ scores divided by
    ``bpr_tau`` (1.0 = standard BPR). ``regulariser(state, uh, vh)`` adds an algorithm's regulariser."""
    model, tr = state.model, state.inter.train
    g = torch.Generator().manual_seed(seed + state.cid)
    model.train()
    total, steps = 0.0, 0
    for _ in range(epochs):
        perm = torch.randperm(tr.size(1), generator=g)
        neg_all = sample_negatives(state.known, tr[0], num_negatives, g)
        for b in torch.split(perm, batch_size):
            u, i, j = tr[0, b], tr[1, b], neg_all[b]
            uh, vh = model.embed()
            pos, neg = pos_neg_cos(model, uh, vh, u, i, j)
            loss = losses.bpr_loss(pos[:, None] / bpr_tau, neg / bpr_tau)
            if regulariser is not None:
                loss = loss + regulariser(state, uh, vh)
            state.optimizer.zero_grad()
            loss.backward()
            state.optimizer.step()
            total += float(loss.detach())
            steps += 1
    return total / max(steps, 1)


def ranking_split_metrics(scores: torch.Tensor, inter, item_group, k: int) -> dict[str, dict[str, float]]:
    """Validation (train masked) and test (train and validation masked) Recall/NDCG@k."""
    return {"val": ranking_metrics(scores, inter.train, inter.val, k, item_group),
            "test": ranking_metrics(scores, torch.cat([inter.train, inter.val], 1), inter.test, k, item_group)}


def graph_client_metrics(state: GraphClient, k: int) -> dict[str, dict[str, float]]:
    state.model.eval()
    with torch.no_grad():
        scores = state.model.scores()
    return ranking_split_metrics(scores, state.inter, state.item_group, k)


def client_structure(state: GraphClient) -> dict:
    inter, w = state.inter, state.eigvals
    return {"users": inter.num_users, "items": inter.num_items, "interactions": int(inter.train.size(1)),
            "avg_degree": 2 * inter.train.size(1) / (inter.num_users + inter.num_items),
            "eigengap": float(np.max(np.diff(w))) if len(w) > 1 else 0.0}
