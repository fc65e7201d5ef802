"""FED-PUB (Baek et al., ICML 2023): personalised subgraph FL.

The server makes one random proxy graph (a stochastic block model with Gaussian features) and
sends it once. Each round every client trains full batch from its personalised model with learnable
sparse weight masks (L1 on the masks) and a proximal term to the model it received, then sends its
weights and its functional embedding: the mean of its model's outputs on the proxy graph. The server
takes the cosine similarity S of the embeddings and gives client i the personalised model
sum_j W_ij θ_j with W_ij = exp(τ S_ij) n_j / sum_k exp(τ S_ik) n_k (n: training nodes). The masks
never leave the client. Defaults follow the authors' code (norm_scale τ = 3, l1 = loc_l2 = 1e-3).

On a ranking dataset ``FedPub(ctx)`` builds the LGCN version instead (``fedpub_ranking.py``); the
``num_negatives``, ``bpr_tau``, ``top_k`` and ``proxy_users/items/density`` keys are used there only."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from fgx.algorithms.base import (Algorithm, LocalTrainParams, check_client_size, copy_model, flat_params,
                                 make_client_state, mean_loss, num_train_items, personalised_average, round_seed,
                                 similarity_weights, steps_per_round, weight_spread)
from fgx.config import ConfigError, spec
from fgx.federation.channel import Message
from fgx.registry import ALGORITHMS
from fgx.tasks import targets


@dataclass
class FedPubParams(LocalTrainParams):
    norm_scale: float = field(default=3.0, metadata=spec(min=0.0, help="τ in exp(τ·cos)"))
    l1: float = field(default=1e-3, metadata=spec(min=0.0, help="L1 weight on the sparse masks"))
    loc_l2: float = field(default=1e-3, metadata=spec(min=0.0, help="proximal weight to the received model"))
    proxy_blocks: int = field(default=5, metadata=spec(min=1, help="blocks of the random proxy graph"))
    proxy_block_size: int = field(default=100, metadata=spec(min=2, help="nodes per proxy block"))
    max_client_nodes: int = field(default=50_000, metadata=spec(
        min=1, help="refuse clients larger than this: FED-PUB trains full batch"))
    # ranking task only (fedpub_ranking.py)
    num_negatives: int = field(default=4, metadata=spec(min=1, help="ranking: negatives per positive"))
    bpr_tau: float = field(default=1.0, metadata=spec(gt=0.0, help="ranking: BPR temperature (1.0 = standard BPR)"))
    top_k: int = field(default=20, metadata=spec(min=1, help="ranking: K of Recall/NDCG@K"))
    proxy_users: int = field(default=250, metadata=spec(min=2, help="ranking: users of the random proxy graph"))
    proxy_items: int = field(default=250, metadata=spec(min=2, help="ranking: items of the random proxy graph"))
    proxy_density: float = field(default=0.05, metadata=spec(gt=0.0, max=1.0, help="ranking: proxy edge density"))


def proxy_graph(num_features: int, blocks: int, size: int, seed: int):
    """The server's random graph: SBM blocks (p_in 0.1, no edges between), N(0, 1) features."""
    import networkx as nx
    from torch_geometric.data import Data

    g = nx.random_partition_graph([size] * blocks, p_in=0.1, p_out=0.0, seed=seed)
    e = torch.tensor(list(g.edges()), dtype=torch.long).t().reshape(2, -1)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(size * blocks, num_features, generator=gen)
    return Data(x=x, edge_index=torch.cat([e, e.flip(0)], 1), num_nodes=size * blocks)


def masked(state) -> dict[str, torch.Tensor]:
    masks = state.extra["masks"]
    return {k: v * masks[k] if k in masks else v for k, v in state.model.named_parameters()}


def fedpub_client_update(state, proxy, p: FedPubParams, round_seed: int):
    """From the personalised weights the server sent (``state.extra["incoming"]``): full-batch local
    training with masks, L1 and the proximal term; returns (weights, functional embedding, loss)."""
    from torch.func import functional_call

    state.model.load_state_dict(state.extra.pop("incoming"))
    anchor = {k: v.detach().clone() for k, v in state.model.named_parameters()}
    masks = state.extra["masks"]
    opt = state.extra["opt"]
    mask, y = targets(state.view, state.task, "train")
    torch.manual_seed(round_seed + state.cid)      # dropout
    state.model.train()
    total, steps = 0.0, steps_per_round(state, p)
    for _ in range(steps):
        opt.zero_grad()
        out = functional_call(state.model, masked(state), (state.view,))
        loss = nn.functional.cross_entropy(out[mask], y, weight=state.loss_weight)
        reg = sum(m.abs().sum() for m in masks.values()) * p.l1
        reg = reg + sum(((w - anchor[k]) ** 2).sum() for k, w in state.model.named_parameters()) * p.loc_l2
        (loss + reg).backward()
        opt.step()
        total += float(loss.detach())
    state.model.eval()
    with torch.no_grad():
        emb = functional_call(state.model, masked(state), (proxy.to(state.view.x.device),)).mean(0)
    return flat_params(state.model), emb.cpu(), total / steps


@ALGORITHMS.register("fedpub", params=FedPubParams, tasks=("node", "ranking"))
class FedPub(Algorithm):
    messages = {"proxy_graph": Message("down"), "personalised_weights": Message("down"),
                "weights": Message("up", release=True), "functional_embedding": Message("up")}

    def __new__(cls, ctx=None):
        if ctx is not None and ctx.info.task == "ranking":
            from fgx.algorithms.fedpub_ranking import FedPubRanking
            return FedPubRanking(ctx)
        return super().__new__(cls)

    @classmethod
    def check_config(cls, params, validated) -> None:
        if validated.entries["dataset"].meta.get("task") == "ranking":
            from fgx.algorithms.fedpub_ranking import check_ranking_config
            check_ranking_config(params, validated)
            return
        super().check_config(params, validated)
        if params.batch_size is not None:
            raise ConfigError("algorithm.batch_size", params.batch_size, "null: FED-PUB trains full batch")

    def setup(self) -> None:
        p = self.params
        check_client_size(self.ctx, p.max_client_nodes,
                          "FED-PUB trains full batch on each client subgraph and does not scale to this data")
        self.views = self.make_views(include_cross=False)
        init = self.ctx.build_model()
        self.states = [make_client_state(self.ctx, c, self.views[c.cid], copy_model(init)) for c in self.ctx.clients]
        for s in self.states:
            s.extra["masks"] = {k: nn.Parameter(torch.ones_like(v)) for k, v in s.model.named_parameters()
                                if v.dim() >= 2}
            s.extra["opt"] = torch.optim.Adam(list(s.model.parameters()) + list(s.extra["masks"].values()),
                                              lr=p.lr, weight_decay=p.weight_decay)
        self.personal = [flat_params(init) for _ in self.states]
        proxy = proxy_graph(self.ctx.in_dim, p.proxy_blocks, p.proxy_block_size, self.ctx.seed)
        got = self.ctx.channel.broadcast("proxy_graph", {"x": proxy.x, "edge_index": proxy.edge_index},
                                         [s.cid for s in self.states], 0)
        proxy.x, proxy.edge_index = got["x"], got["edge_index"]
        self.proxy = proxy

    def round(self, r: int) -> dict[str, float]:
        p, ch = self.params, self.ctx.channel
        for s, w in zip(self.states, self.personal):
            s.extra["incoming"] = ch.send("personalised_weights", w, src="server", dst=s.cid, round=r)
        results = self.ctx.executor.map(fedpub_client_update, self.states, self.proxy, p, round_seed(self.ctx.seed, r))
        thetas = [ch.send("weights", w, src=s.cid, dst="server", round=r) for s, (w, _, _) in zip(self.states, results)]
        embs = torch.stack([ch.send("functional_embedding", e, src=s.cid, dst="server", round=r)
                            for s, (_, e, _) in zip(self.states, results)])
        sizes = torch.tensor([num_train_items(s) for s in self.states])
        W = similarity_weights(embs, sizes, p.norm_scale)
        self.personal = [personalised_average(thetas, W[i], i) for i in range(len(thetas))]
        self.ctx.record("fedpub_weights", {"W": W.tolist()})
        return {"loss": mean_loss(l for _, _, l in results), **weight_spread(W)}

    def model_for(self, client):
        """The client's masked model (as it trained; the next personalised weights come next round)."""
        s = self.states[client.cid]
        m = s.extra.setdefault("eval_model", copy_model(s.model))
        with torch.no_grad():
            m.load_state_dict({**s.model.state_dict(), **{k: v.detach() for k, v in masked(s).items()}})
        return m

    local_model_for = model_for   # already the model as the client's local step left it
    has_local_models = True

    def state_dict(self) -> dict:
        return {"personal": self.personal, "models": [s.model.state_dict() for s in self.states],
                "masks": [{k: v.detach() for k, v in s.extra["masks"].items()} for s in self.states],
                "optimizers": [s.extra["opt"].state_dict() for s in self.states]}   # each client's Adam persists

    def load_state_dict(self, state: dict) -> None:
        self.personal = state["personal"]
        for s, m, mk, o in zip(self.states, state["models"], state["masks"], state["optimizers"]):
            s.model.load_state_dict(m)
            with torch.no_grad():
                for k, v in mk.items():
                    s.extra["masks"][k].copy_(v)
            s.extra["opt"].load_state_dict(o)
