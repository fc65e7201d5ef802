"""FED-PUB (Baek et al., ICML 2023) on the ranking task, on LPSFed's LGCN clients (the LPSFed paper runs
FedPUB "based on LGCN", Table 9's note). ``algorithm=fedpub`` picks this on a ranking dataset.

Same mechanism as the node version (``fedpub.py``): the server sends one random proxy graph; every
round each client trains from the personalised shared weights it received, through learnable sparse
masks (L1) and with a proximal term to the received weights, then sends its shared weights and its
functional embedding, the mean of its model's output on the proxy graph. The server weighs client j
for client i by W_ij ∝ exp(τ cos(e_i, e_j)) n_j (n: training interactions) and sends each its own
weighted average.

Adaptation to LGCN (fgx decisions; the LPSFed paper gives no details):
- Shared weights = what LPSFed and FedAvg (LGCN) share, the pooling MLP and f_Pred
  (``model.shared_keys``), so FedPUB differs from FedAvg (LGCN) only by its personalised aggregation and
  masks. ID embeddings and the spectral kernels stay local. Masks cover the shared weight matrices
  (FED-PUB masks every weight with two or more dimensions).
- Proxy graph: a random bipartite graph (GNMK, ``proxy_users`` × ``proxy_items`` with ``proxy_density``)
  with N(0, 1) input embeddings, sent once. Each client runs its own kernels over the proxy's Φ lowest
  Laplacian eigenvectors and its masked pooling MLP on top; the functional embedding is the mean pooled
  output over the proxy nodes.
- Loss: BPR on cos R̂ with temperature ``bpr_tau`` (1.0 = standard BPR), ``num_negatives`` uniform
  negatives per positive; ``local_epochs`` passes of ``batch_size`` pairs (or ``local_steps`` full-batch
  steps when ``local_epochs`` is null)."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.func import functional_call

from fgx.algorithms.base import Algorithm, require_model, similarity_weights, weight_spread
from fgx.federation.client import round_seed
from fgx.recsys import losses
from fgx.recsys.graph_clients import (GraphClient, build_graph_clients, make_optimizer, ranking_split_metrics,
                                      require_graph_model)
from fgx.recsys.spectral import anchor_graph, bipartite_laplacian, lowest_eigenpairs
from fgx.recsys.training import sample_negatives


def check_ranking_config(params, validated) -> None:
    require_graph_model(validated, "FED-PUB on the ranking task")
    require_model(validated, "lgcn", why="FED-PUB's proxy graph runs the spectral kernels")


def proxy_bipartite(users: int, items: int, density: float, dim: int, seed: int) -> dict:
    """The server's random proxy: GNMK edges and N(0, 1) input embeddings for its users and items."""
    e = max(1, int(round(density * users * items)))
    u, i = anchor_graph("gnmk", users, items, e, seed=seed)
    g = torch.Generator().manual_seed(seed)
    return {"sizes": torch.tensor([users, items]), "users": torch.as_tensor(np.asarray(u), dtype=torch.long),
            "items": torch.as_tensor(np.asarray(i), dtype=torch.long), "emb": torch.randn(users + items, dim, generator=g)}


def proxy_eigvecs(proxy: dict, phi: int) -> torch.Tensor:
    n_u, n_i = (int(x) for x in proxy["sizes"])
    lap = bipartite_laplacian(proxy["users"].numpy(), proxy["items"].numpy(), n_u, n_i)
    _, v = lowest_eigenpairs(lap, phi)
    return torch.from_numpy(np.ascontiguousarray(v)).float()


class PubRankingClient(GraphClient):
    """A FED-PUB ranking client: beside GraphClient's, its masks, the personalised weights it received
    and the public proxy graph's embeddings and eigenvectors."""

    def __init__(self, *args):
        super().__init__(*args)
        self.masks: dict = {}                         # name -> learnable mask of a shared weight matrix (never sent)
        self.incoming: dict | None = None             # the personalised weights the server sent this round
        self.proxy_emb: torch.Tensor | None = None
        self.proxy_ev: torch.Tensor | None = None


def masked(state: PubRankingClient) -> dict[str, torch.Tensor]:
    masks = state.masks
    return {k: v * masks[k] if k in masks else v for k, v in state.model.named_parameters()}


def shared_params(model) -> dict[str, torch.Tensor]:
    sd = model.state_dict()
    return {k: sd[k].detach().clone() for k in model.shared_keys()}


def fedpub_ranking_update(state: PubRankingClient, p, r_seed: int):
    """Local training from the received shared weights; returns (shared weights, functional embedding, loss)."""
    model = state.model
    incoming, state.incoming = state.incoming, None
    model.load_state_dict(incoming, strict=False)
    shared = set(model.shared_keys())
    anchor = {k: v.detach().clone() for k, v in model.named_parameters() if k in shared}
    masks, opt = state.masks, state.optimizer
    tr = state.inter.train
    g = torch.Generator().manual_seed(r_seed + state.cid)
    model.train()
    epochs = p.local_epochs or p.local_steps
    batch = p.batch_size if p.local_epochs else None
    total, steps = 0.0, 0
    for _ in range(epochs):
        perm = torch.randperm(tr.size(1), generator=g)
        neg_all = sample_negatives(state.known, tr[0], p.num_negatives, g)
        for b in torch.split(perm, batch or tr.size(1)):
            u, i, j = tr[0, b], tr[1, b], neg_all[b]
            users = u[:, None].expand(-1, 1 + j.size(1))
            both = functional_call(model, masked(state), (users, torch.cat([i[:, None], j], 1)))
            loss = losses.bpr_loss(both[:, :1] / p.bpr_tau, both[:, 1:] / p.bpr_tau)
            reg = sum(m.abs().sum() for m in masks.values()) * p.l1
            reg = reg + sum(((w - anchor[k]) ** 2).sum() for k, w in model.named_parameters() if k in anchor) * p.loc_l2
            opt.zero_grad()
            (loss + reg).backward()
            opt.step()
            total += float(loss.detach())
            steps += 1
    model.eval()
    with torch.no_grad():
        out = functional_call(model, masked(state), (), {"proxy": (state.proxy_emb, state.proxy_ev)})
    return shared_params(model), out.mean(0), total / max(steps, 1)


class FedPubRanking(Algorithm):
    """``algorithm=fedpub`` on ranking data (``FedPub(ctx)`` returns this object there; the run's channel
    carries FedPub's message kinds)."""
    needs_individual_updates = "FED-PUB's server averages each client's own model with personalised similarity weights"

    def setup(self) -> None:
        ctx, p = self.ctx, self.params
        self.clients = build_graph_clients(ctx, p.lr, p.weight_decay, p.optimizer, client_cls=PubRankingClient)
        for cl in self.clients:
            cl.masks = {k: nn.Parameter(torch.ones_like(v)) for k, v in cl.model.named_parameters()
                        if k in set(cl.model.shared_keys()) and v.dim() >= 2}
            # one optimiser over the model and its masks (replaces the one build_graph_clients made)
            cl.optimizer = make_optimizer(p.optimizer, list(cl.model.parameters()) + list(cl.masks.values()),
                                          p.lr, p.weight_decay)
        init = shared_params(self.clients[0].model)
        self.personal = [{k: v.clone() for k, v in init.items()} for _ in self.clients]
        mp = ctx.model_params
        proxy = proxy_bipartite(p.proxy_users, p.proxy_items, p.proxy_density, mp.dim, ctx.seed)
        got = ctx.channel.broadcast("proxy_graph", proxy, [c.cid for c in self.clients], 0)
        ev = proxy_eigvecs(got, mp.frequency)     # every client computes the same public decomposition
        for cl in self.clients:
            cl.proxy_emb, cl.proxy_ev = got["emb"], ev

    def round(self, r: int) -> dict[str, float]:
        p, ch = self.params, self.ctx.channel
        for cl, w in zip(self.clients, self.personal):
            cl.incoming = ch.send("personalised_weights", w, src="server", dst=cl.cid, round=r)
        results = self.ctx.executor.map(fedpub_ranking_update, self.clients, p, round_seed(self.ctx.seed, r))
        thetas = [ch.send("weights", w, src=cl.cid, dst="server", round=r) for cl, (w, _, _) in zip(self.clients, results)]
        embs = torch.stack([ch.send("functional_embedding", e, src=cl.cid, dst="server", round=r)
                            for cl, (_, e, _) in zip(self.clients, results)])
        sizes = torch.tensor([cl.inter.train.size(1) for cl in self.clients])
        W = similarity_weights(embs, sizes, p.norm_scale)
        self.personal = [{k: sum(W[i, j] * thetas[j][k] for j in range(len(thetas))) for k in thetas[0]}
                         for i in range(len(thetas))]
        self.ctx.record("fedpub_weights", {"W": W.tolist()})
        return {"loss": float(np.mean([l for _, _, l in results])), **weight_spread(W)}

    def client_metrics(self, client) -> dict[str, dict[str, float]]:
        cl = self.clients[client.cid]
        cl.model.eval()
        with torch.no_grad():
            scores = functional_call(cl.model, masked(cl), ())
        return ranking_split_metrics(scores, cl.inter, cl.item_group, self.params.top_k)

    def state_dict(self) -> dict:
        return {"personal": self.personal, "models": [c.model.state_dict() for c in self.clients],
                "optimizers": [c.optimizer.state_dict() for c in self.clients],
                "masks": [{k: v.detach() for k, v in c.masks.items()} for c in self.clients]}

    def load_state_dict(self, state: dict) -> None:
        self.personal = state["personal"]
        for c, m, o, mk in zip(self.clients, state["models"], state["optimizers"], state["masks"]):
            c.model.load_state_dict(m)
            c.optimizer.load_state_dict(o)
            with torch.no_grad():
                for k, v in mk.items():
                    c.masks[k].copy_(v)
