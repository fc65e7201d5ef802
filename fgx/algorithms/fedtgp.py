"""FedTGP (Zhang et al., AAAI 2024): FedProto whose global prototypes are trainable. The server keeps
a small network (class embedding [C, d] → Linear(d, d) → ReLU → Linear(d, d)) whose output for class c
is c's global prototype, and trains it each round on the clients' uploaded prototypes with
adaptive-margin-enhanced contrastive learning: cross-entropy over minus the Euclidean distances from
each uploaded prototype to every global prototype, with the margin δ added to the distance to its own
class, δ = min(max_c min_{c'≠c} ‖P̄_c − P̄_c'‖, τ) from this round's class-averaged uploads P̄.
Clients are FedProto's (λ·MSE to the global prototypes, nearest-prototype inference).

Checked against the authors' code (TsingZ0/FedTGP servertgp.py: ``receive_protos`` for the class-wise
gaps, ``update_TGP`` for the margin loss, SGD at the clients' learning rate over batches of the local
batch size, ``Trainable_Global_Prototypes``; run_me.sh: λ = 10, 100 server epochs, τ = 100) and
OpenFGL flcore/fedtgp. Privacy: as FedProto (fedproto.py)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from fgx.algorithms.fedproto import FedProto, FedProtoParams
from fgx.config import spec
from fgx.models.base import NodeGNN
from fgx.registry import ALGORITHMS


@dataclass
class FedTGPParams(FedProtoParams):
    lamda: float = field(default=10.0, metadata=spec(min=0.0, help="weight λ of the prototype (MSE) term"))
    margin_threshold: float = field(default=100.0, metadata=spec(min=0.0, help="tau: the adaptive margin's cap"))
    server_epochs: int = field(default=100, metadata=spec(min=1, help="passes over the uploaded prototypes per round"))
    server_batch_size: int = field(default=10, metadata=spec(min=1, help="uploaded prototypes per server step"))
    server_lr: float | None = field(default=None, metadata=spec(gt=0.0, help="server SGD step; null: algorithm.lr"))


class TrainablePrototypes(nn.Module):
    """Class id -> global prototype: an embedding row through a one-hidden-layer MLP (hidden = d)."""

    def __init__(self, num_classes: int, dim: int):
        super().__init__()
        self.embedding = nn.Embedding(num_classes, dim)
        self.middle = nn.Sequential(nn.Linear(dim, dim), nn.ReLU())
        self.fc = nn.Linear(dim, dim)

    def forward(self, classes: torch.Tensor) -> torch.Tensor:
        return self.fc(self.middle(self.embedding(classes)))


def adaptive_margin(protos: torch.Tensor, present: torch.Tensor, cap: float) -> float:
    """min(max over the uploaded classes of the distance from a class's mean upload to the nearest other
    class's, cap): the authors' ``max_gap`` (absent classes take the smallest gap, which leaves the max as is)."""
    have = present.sum(0) > 0
    if int(have.sum()) < 2:
        return 0.0
    avg = (protos * present.unsqueeze(2)).sum(0)[have] / present.sum(0)[have].unsqueeze(1)
    d = torch.cdist(avg, avg)
    d.fill_diagonal_(float("inf"))
    return min(float(d.min(1).values.max()), cap)


def margin_loss(x: torch.Tensor, y: torch.Tensor, P: torch.Tensor, margin: float) -> torch.Tensor:
    """Adaptive-margin contrastive loss: cross-entropy over minus the Euclidean distances from each
    uploaded prototype x to the global prototypes P, its own class's distance increased by the margin."""
    dist = torch.cdist(x, P) + margin * nn.functional.one_hot(y, P.size(0))
    return nn.functional.cross_entropy(-dist, y)


@ALGORITHMS.register("fedtgp", params=FedTGPParams, tasks=("node", "graph"))
class FedTGP(FedProto):
    def setup(self) -> None:
        super().setup()
        model = self.states[0].model        # a NodeGNN's classifier or a GraphGNN's readout (check_setting)
        dim = model.classifier.in_features if isinstance(model, NodeGNN) else model.readout.in_features
        with torch.random.fork_rng():
            torch.manual_seed(self.ctx.seed + 424242)
            self.tgp = TrainablePrototypes(self.ctx.out_dim, dim).to(self.ctx.device)

    def server_update(self, uploads: list[dict], r: int) -> dict[str, float]:
        """Train the global prototypes on this round's uploads with the adaptive margin."""
        p = self.params
        protos = torch.stack([u["protos"] for u in uploads])        # [M, C, d]
        present = torch.stack([u["present"] for u in uploads])      # [M, C]
        margin = adaptive_margin(protos, present, p.margin_threshold)
        idx = present.nonzero()                                     # (client, class) of every upload
        x, y = protos[idx[:, 0], idx[:, 1]], idx[:, 1]
        opt = torch.optim.SGD(self.tgp.parameters(), lr=p.server_lr or p.lr)
        classes = torch.arange(self.ctx.out_dim, device=x.device)
        g = torch.Generator().manual_seed(self.ctx.seed * 7919 + r)
        self.tgp.train()
        loss = torch.tensor(float("nan"))
        for _ in range(p.server_epochs):
            for b in torch.randperm(x.size(0), generator=g).split(p.server_batch_size):
                b = b.to(x.device)
                loss = margin_loss(x[b], y[b], self.tgp(classes), margin)
                opt.zero_grad()
                loss.backward()
                opt.step()
        self.tgp.eval()
        with torch.no_grad():
            P = self.tgp(classes).detach()
        # every class has a trained prototype (the authors send all C); diagnostics: the margin used
        self.global_protos = (P, torch.ones(self.ctx.out_dim, dtype=P.dtype, device=P.device))
        return {"prototype_margin": margin, "server_loss": float(loss.detach())}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "tgp": self.tgp.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.tgp.load_state_dict(state["tgp"])
