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
from typing import Any

import torch
from torch import nn

from fgx.algorithms.base import (Algorithm, check_client_size, copy_model, flat_params, mean_loss,
                                  personalised_average, similarity_weights, weight_spread)
from fgx.config import ConfigError, spec
from fgx.federation.channel import Message
from fgx.federation.client import (ClientState, LocalTrainParams, SeededDropout, make_client_state, num_train_items,
                                   round_seed)
from fgx.registry import ALGORITHMS


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


@dataclass
class FedPubClient(ClientState):
    masks: dict | None = None        # name -> learnable mask of each weight matrix (never sent)
    incoming: dict | None = None     # the personalised weights the server sent this round
    eval_model: nn.Module | None = None   # scratch copy holding the masked weights when scored


def masked(state) -> dict[str, torch.Tensor]:
    masks = state.masks
    return {k: v * masks[k] if k in masks else v for k, v in state.model.named_parameters()}


@dataclass
class MaskedProximal(SeededDropout):
    """FED-PUB's client, from the personalised weights the server sent (``state.incoming``): full-batch
    steps of the masked model (``forward``) with L1 on the masks and the proximal term to the received
    weights (``term``); dropout seeded by round and client. ``finish``: the weights and the functional
    embedding (the mean output on the proxy graph), which go up."""
    p: FedPubParams = None
    proxy: Any = None                        # the server's proxy graph (PyG Data)
    anchor: dict | None = None               # the received weights, name -> tensor
    unbatched = "its forward runs each client's masked weights through its own masks"

    def start(self, state, weights):
        incoming, state.incoming = state.incoming, None
        state.model.load_state_dict(incoming)
        anchor = {k: v.detach().clone() for k, v in state.model.named_parameters()}
        super().start(state, weights)           # dropout: seeded by round and client
        return MaskedProximal(self.round_seed, self.p, self.proxy, anchor)

    def forward(self, state):
        from torch.func import functional_call

        return None, functional_call(state.model, masked(state), (state.view,))

    def term(self, state, step):
        reg = sum(m.abs().sum() for m in state.masks.values()) * self.p.l1
        return reg + sum(((w - self.anchor[k]) ** 2).sum() for k, w in state.model.named_parameters()) * self.p.loc_l2

    def finish(self, state, delta):
        from torch.func import functional_call

        state.model.eval()
        with torch.no_grad():
            emb = functional_call(state.model, masked(state), (self.proxy.to(state.view.x.device),)).mean(0)
        return flat_params(state.model), emb.cpu()


@ALGORITHMS.register("fedpub", params=FedPubParams, tasks=("node", "ranking"))
class FedPub(Algorithm):
    """The base round's phases: personalised weights down (``client_objective``), masked local training
    (``MaskedProximal``), weights and functional embeddings up (``aggregate``), the personalised averages
    (``server_update``)."""
    needs_individual_updates = "FED-PUB's server averages each client's own model with personalised similarity weights"
    objective = MaskedProximal
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
        self.states = [make_client_state(self.ctx, c, self.views[c.cid], copy_model(init), FedPubClient)
                       for c in self.ctx.clients]
        for s in self.states:
            s.masks = {k: nn.Parameter(torch.ones_like(v)) for k, v in s.model.named_parameters() if v.dim() >= 2}
            # one Adam over the model and its masks: the local steps' optimiser
            s.optimizer = torch.optim.Adam(list(s.model.parameters()) + list(s.masks.values()),
                                           lr=p.lr, weight_decay=p.weight_decay)
        self.personal = [flat_params(init) for _ in self.states]
        proxy = proxy_graph(self.ctx.in_dim, p.proxy_blocks, p.proxy_block_size, self.ctx.seed)
        got = self.ctx.channel.broadcast("proxy_graph", {"x": proxy.x, "edge_index": proxy.edge_index},
                                         [s.cid for s in self.states], 0)
        proxy.x, proxy.edge_index = got["x"], got["edge_index"]
        self.proxy = proxy

    def client_objective(self, chosen, weights, r):
        """Each client's personalised weights down to it (they start its local steps)."""
        for s, w in zip(self.states, self.personal):
            s.incoming = self.ctx.channel.send("personalised_weights", w, src="server", dst=s.cid, round=r)
        return MaskedProximal(round_seed(self.ctx.seed, r), self.params, self.proxy)

    def aggregate(self, chosen, updates, r):
        """The clients' weights and functional embeddings up; W from the embeddings' similarities."""
        ch = self.ctx.channel
        thetas = [ch.send("weights", u.sent[0], src=s.cid, dst="server", round=r) for s, u in zip(chosen, updates)]
        embs = torch.stack([ch.send("functional_embedding", u.sent[1], src=s.cid, dst="server", round=r)
                            for s, u in zip(chosen, updates)])
        sizes = torch.tensor([num_train_items(s) for s in chosen])
        W = similarity_weights(embs, sizes, self.params.norm_scale)
        return (thetas, W), {"loss": mean_loss(u.loss.ce for u in updates), **weight_spread(W)}

    def server_update(self, combined, r):
        """Client i's next personalised model: Σ_j W_ij θ_j."""
        thetas, W = combined
        self.personal = [personalised_average(thetas, W[i], i) for i in range(len(thetas))]
        self.ctx.record("fedpub_weights", {"W": W.tolist()})
        return {}

    def model_for(self, client):
        """The client's masked model (as it trained; the next personalised weights come next round)."""
        s = self.states[client.cid]
        if s.eval_model is None:
            s.eval_model = copy_model(s.model)
        m = s.eval_model
        with torch.no_grad():
            m.load_state_dict({**s.model.state_dict(), **{k: v.detach() for k, v in masked(s).items()}})
        return m

    local_model_for = model_for   # already the model as the client's local step left it
    has_local_models = True

    def state_dict(self) -> dict:
        return {"personal": self.personal, "models": [s.model.state_dict() for s in self.states],
                "masks": [{k: v.detach() for k, v in s.masks.items()} for s in self.states],
                "optimizers": [s.optimizer.state_dict() for s in self.states]}   # each client's Adam persists

    def load_state_dict(self, state: dict) -> None:
        self.personal = state["personal"]
        for s, m, mk, o in zip(self.states, state["models"], state["masks"], state["optimizers"]):
            s.model.load_state_dict(m)
            with torch.no_grad():
                for k, v in mk.items():
                    s.masks[k].copy_(v)
            s.optimizer.load_state_dict(o)
