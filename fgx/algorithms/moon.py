"""MOON (Li, He & Song, CVPR 2021): model-contrastive federated learning. FedAvg whose local objective
adds μ·ℓ_con, where for each training item with representation z (local model being trained), z_glob
(the global model this round started from) and z_prev (this client's model after its previous local
training):

    ℓ_con = -log( exp(cos(z, z_glob)/τ) / (exp(cos(z, z_glob)/τ) + exp(cos(z, z_prev)/τ)) )

Checked against MOON's ``train_net_fedcon`` (as copied in public forks of Xtra-Computing/MOON, which
was not retrievable here: the global and previous models in eval mode, the two cosine similarities as
logits of a cross-entropy with target 0, μ·that added to the task loss), TsingZ0/PFLlib clientmoon.py and
OpenFGL flcore/moon (the representation under the classifier on graphs; OpenFGL skips the term in round
0, fgx uses the initial model as the previous one until a client has trained). The global and
previous representations are fixed during local training (eval mode, fixed weights), so they are
computed once per round over the client's whole graph; items are the client's training items."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from fgx.algorithms.base import flat_params, mean_loss
from fgx.algorithms.fedavg import FedAvg, FedAvgParams
from fgx.algorithms.representation import RepresentationObjective, check_setting, split_forward
from fgx.config import spec
from fgx.federation.client import ClientState
from fgx.registry import ALGORITHMS


@dataclass
class MoonParams(FedAvgParams):
    mu: float = field(default=1.0, metadata=spec(min=0.0, help="weight of the model-contrastive loss"))
    temperature: float = field(default=0.5, metadata=spec(gt=0.0, help="tau of the contrastive logits"))


@dataclass
class MoonClient(ClientState):
    prev_weights: dict | None = None     # the client's model after its previous local training (None: never trained)


def representation_of(state, weights: dict) -> torch.Tensor:
    """[n, d] the representation of every item of the client's view under ``weights`` (eval mode, no grad)."""
    state.model.load_state_dict(weights, strict=False)
    state.model.eval()
    with torch.no_grad():
        return split_forward(state.model, state.view)[0].detach()


@dataclass
class Contrastive(RepresentationObjective):
    """μ · ℓ_con, mean over the step's items, with the global representation as the positive pair and
    the previous one as the negative (both fixed for the round: computed once in ``start``)."""
    mu: float
    tau: float
    z_glob: torch.Tensor | None = None       # [n, d]
    z_prev: torch.Tensor | None = None       # [n, d]
    inert: bool = False                      # z_prev = z_glob this round: the term is a constant

    def start(self, state, weights):
        if state.prev_weights is None:        # never trained: the initial model
            state.prev_weights = flat_params(state.model)
        prev = state.prev_weights
        # the previous model is the one this round starts from (every client in round 1): z_prev = z_glob
        inert = all(k in prev and torch.equal(prev[k], v) for k, v in weights.items())
        z_prev = representation_of(state, state.prev_weights)
        return Contrastive(self.mu, self.tau, representation_of(state, weights), z_prev, inert)

    def term(self, state, step):
        z = step.rep[step.items]
        pos = nn.functional.cosine_similarity(z, self.z_glob[step.items], dim=-1)
        neg = nn.functional.cosine_similarity(z, self.z_prev[step.items], dim=-1)
        sims = torch.stack([pos, neg], dim=1) / self.tau
        con = self.mu * nn.functional.cross_entropy(sims, torch.zeros(z.size(0), dtype=torch.long, device=z.device))
        # inert: μ·ℓ_con = μ·ln 2 whatever z, zero gradient. Its value less that constant keeps the gradient
        # bit for bit (the two opposite halves still pass through autograd) and reports 0: what acts
        return con - con.detach() if self.inert else con

    def finish(self, state, delta):
        state.prev_weights = flat_params(state.model)


@ALGORITHMS.register("moon", params=MoonParams, tasks=("node", "graph", "link"))
class Moon(FedAvg):
    objective = Contrastive
    client_state = MoonClient

    @classmethod
    def check_config(cls, params, validated) -> None:
        super().check_config(params, validated)
        check_setting(params, validated, "moon")

    @classmethod
    def reduces_to(cls, params, top) -> str | None:
        return "fedavg: mu = 0" if params.mu == 0 else None

    def client_objective(self, chosen, weights, r):
        return Contrastive(self.params.mu, self.params.temperature)

    threat_hooks = True     # its aggregate is FedAvg's (super) plus its own bookkeeping

    def aggregate(self, chosen, updates, r):
        """FedAvg's average; the loss is the cross-entropy, and MOON's diagnostic μ·ℓ_con over it (mean
        over clients), the contrastive loss's share of the local objective. A client whose previous model
        is the round's start model (round 1) counts 0 (``Contrastive.term``): the share reports what acts on
        the gradient, not the constant μ·ln 2."""
        mean, stats = super().aggregate(chosen, updates, r)
        loss = stats["loss"] = mean_loss(u.loss.ce for u in updates)
        con = mean_loss(u.loss.term for u in updates)
        if con == con and loss == loss:
            stats["contrastive_loss"] = con
            stats["regulariser_share"] = stats["contrastive_loss"] / max(abs(loss), 1e-30)
        return mean, stats

    def state_dict(self) -> dict:
        return {**super().state_dict(), "prev": [s.prev_weights for s in self.states]}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        for s, w in zip(self.states, state["prev"]):
            if w is not None:
                s.prev_weights = w
