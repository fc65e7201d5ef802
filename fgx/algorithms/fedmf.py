"""FedMF (Chai et al., IEEE Intelligent Systems 2020) on client user-item subgraphs.

The server keeps one global item-embedding table. Each round every client starts from the global
rows of the items it holds, trains its model (``mf`` or ``lightgcn``) with BPR for the local epochs,
and uploads the change of those item rows (the sum of its local updates: FedMF's item gradients,
sent here without FedMF's homomorphic encryption). The server adds, per item, the mean update of
the clients holding it, and sends the new rows back. User embeddings never leave a client. As in
FedMF without its padding trick, the ids of the items a client holds are disclosed to the server."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from fgx.algorithms.base import Algorithm, require_model
from fgx.config import spec
from fgx.federation.channel import Message
from fgx.federation.client import round_seed
from fgx.recsys.bipartite import client_interactions
from fgx.recsys.metrics import popularity_groups, ranking_metrics
from fgx.recsys.training import bpr_epochs, known_matrix
from fgx.registry import ALGORITHMS

ITEM_MODELS = ("mf", "lightgcn")


@dataclass
class ItemSharingParams:
    """What every item-sharing recommender (FedMF, pFedRec, FedRAP, F2MF) trains with."""
    lr: float = field(default=0.005, metadata=spec(gt=0.0))
    optimizer: str = field(default="adam", metadata=spec(choices=["adam", "sgd"]))
    local_epochs: int = field(default=5, metadata=spec(min=1, help="passes over the training pairs per round"))
    batch_size: int = field(default=1024, metadata=spec(min=1))
    num_negatives: int = field(default=1, metadata=spec(min=1))
    l2: float = field(default=1e-4, metadata=spec(min=0.0, help="L2 on the batch's layer-0 embeddings"))
    server_lr: float = field(default=1.0, metadata=spec(gt=0.0, help="scale of the mean item update"))
    top_k: int = field(default=20, metadata=spec(min=1))


@dataclass
class FedMFParams(ItemSharingParams):
    bpr_tau: float = field(default=1.0, metadata=spec(
        gt=0.0, help="BPR temperature: -log σ((s_ui - s_uj)/τ); 1.0 = standard BPR (tuned like every BPR method's)"))


class ItemClient:
    """What stays on one client: its interactions, model (user embeddings included) and optimiser."""

    def __init__(self, cid, inter, model, optimizer):
        self.cid, self.inter, self.model, self.optimizer = cid, inter, model, optimizer
        self.known = known_matrix(inter.train, inter.num_users, inter.num_items)
        self.item_group = popularity_groups(inter.train[1], inter.num_items)
        self.delta = torch.zeros_like(model.item_emb.weight)
        self.pending = None               # global item rows not yet applied (pFedRec)


def make_optimizer(name: str, params, lr: float) -> torch.optim.Optimizer:
    return (torch.optim.SGD if name == "sgd" else torch.optim.Adam)(params, lr=lr)


def fedmf_train(state: ItemClient, p: FedMFParams, seed: int) -> float:
    start = state.model.item_emb.weight.detach().clone()
    g = torch.Generator().manual_seed(seed + state.cid)
    loss = bpr_epochs(state.model, state.inter.train, state.known, state.optimizer, p.local_epochs,
                      p.batch_size, p.num_negatives, p.l2, g, bpr_tau=p.bpr_tau)
    state.delta = state.model.item_emb.weight.detach() - start
    return loss


@ALGORITHMS.register("fedmf", params=FedMFParams, tasks=("ranking",))
class FedMF(Algorithm):
    messages = {
        "item_updates": Message("up"),        # {"items": the client's global item ids, "delta": [n_c, D]}
        "item_embeddings": Message("down"),   # the global rows of the client's items
    }
    train_fn = staticmethod(fedmf_train)
    model_names = ITEM_MODELS             # the models this algorithm can build per client

    @classmethod
    def check_config(cls, params, validated) -> None:
        require_model(validated, *cls.model_names, why=f"{cls.__name__} shares item embeddings")

    def build_client(self, c) -> ItemClient:
        inter = client_interactions(c, self.ctx.global_data.num_users)
        torch.manual_seed(self.ctx.seed * 7919 + c.cid)
        model = self.ctx.model_builder.per_client(self.ctx.model_params, inter)
        return ItemClient(c.cid, inter, model, make_optimizer(self.params.optimizer, model.parameters(), self.params.lr))

    def setup(self) -> None:
        self.clients = [self.build_client(c) for c in self.ctx.clients]
        mp = self.ctx.model_params
        # the server's own stream: a plain manual_seed(seed) would replay client 0's user-embedding init
        g = torch.Generator().manual_seed(int(np.random.SeedSequence([self.ctx.seed, 0xF3D]).generate_state(1)[0]))
        self.items = torch.randn(self.ctx.global_data.num_items, mp.dim, generator=g) * mp.emb_init_std
        self.send_items(0)

    def send_items(self, r: int) -> None:
        for cl in self.clients:
            rows = self.ctx.channel.send("item_embeddings", self.items[cl.inter.items_global].clone(),
                                         src="server", dst=cl.cid, round=r)
            self.receive(cl, rows)

    def receive(self, cl: ItemClient, rows: torch.Tensor) -> None:
        """FedMF: the client's item table becomes the global rows at once."""
        with torch.no_grad():
            cl.model.item_emb.weight.copy_(rows)

    def round_seed(self, r: int) -> int:
        return round_seed(self.ctx.seed, r)

    def train_round(self, r: int) -> list[float]:
        """Every client's local training of round r (returns the losses)."""
        return self.ctx.executor.map(self.train_fn, self.clients, self.params, self.round_seed(r))

    def after_round(self, r: int) -> None:
        """Hook after the server step and before the rows go back (records)."""

    def round_stats(self) -> dict[str, float]:
        """Hook: a subclass's mechanism diagnostics for metrics.jsonl (the regulariser's share of the loss)."""
        return {}

    def round(self, r: int) -> dict[str, float]:
        p, ch = self.params, self.ctx.channel
        losses = self.train_round(r)
        total = torch.zeros_like(self.items)
        count = torch.zeros(self.items.size(0))
        for cl in self.clients:
            up = ch.send("item_updates", {"items": cl.inter.items_global.clone(), "delta": cl.delta.clone()},
                         src=cl.cid, dst="server", round=r)
            total.index_add_(0, up["items"], up["delta"])
            count.index_add_(0, up["items"], torch.ones(up["items"].numel()))
        held = count > 0
        self.items[held] += p.server_lr * total[held] / count[held, None]
        self.held = held
        self.after_round(r)
        self.send_items(r)
        return {"loss": float(sum(losses) / len(losses)), **self.round_stats()}

    def score_model(self, cl: ItemClient):
        return cl.model.scores

    def client_metrics(self, client) -> dict[str, dict[str, float]]:
        cl = self.clients[client.cid]
        cl.model.eval()
        with torch.no_grad():
            scores = self.score_model(cl)()
        inter, k = cl.inter, self.params.top_k
        return {"val": ranking_metrics(scores, inter.train, inter.val, k, cl.item_group),
                "test": ranking_metrics(scores, torch.cat([inter.train, inter.val], 1), inter.test, k, cl.item_group)}

    def state_dict(self) -> dict:
        return {"items": self.items, "models": [c.model.state_dict() for c in self.clients],
                "optimizers": [c.optimizer.state_dict() for c in self.clients]}

    def load_state_dict(self, state: dict) -> None:
        self.items = state["items"]
        for c, m, o in zip(self.clients, state["models"], state["optimizers"]):
            c.model.load_state_dict(m)
            c.optimizer.load_state_dict(o)
