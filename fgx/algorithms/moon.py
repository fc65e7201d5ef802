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

from fgx.algorithms.base import flat_params, mean_loss, round_seed, state_delta, steps_per_round
from fgx.algorithms.fedavg import FedAvg, FedAvgParams
from fgx.algorithms.representation import check_setting, objective_steps, split_forward
from fgx.config import spec
from fgx.registry import ALGORITHMS


@dataclass
class MoonParams(FedAvgParams):
    mu: float = field(default=1.0, metadata=spec(min=0.0, help="weight of the model-contrastive loss"))
    temperature: float = field(default=0.5, metadata=spec(gt=0.0, help="tau of the contrastive logits"))


def representation_of(state, weights: dict) -> torch.Tensor:
    """The representation of every item of the client's view under ``weights`` (eval mode, no grad)."""
    state.model.load_state_dict(weights, strict=False)
    state.model.eval()
    with torch.no_grad():
        return split_forward(state.model, state.view)[0].detach()


def contrastive_term(state, rep, logits, batch, y):
    """μ · mean over the batch of ℓ_con (the global representation as the positive pair)."""
    mu, tau = state.extra["moon_mu"], state.extra["moon_tau"]
    z = rep[batch]
    pos = nn.functional.cosine_similarity(z, state.extra["z_glob"][batch], dim=-1)
    neg = nn.functional.cosine_similarity(z, state.extra["z_prev"][batch], dim=-1)
    sims = torch.stack([pos, neg], dim=1) / tau
    return mu * nn.functional.cross_entropy(sims, torch.zeros(z.size(0), dtype=torch.long, device=z.device))


def moon_client_update(state, global_weights: dict, p: MoonParams, seed: int):
    """Local training with the contrastive term; returns (Δ, cross-entropy, μ·ℓ_con) means."""
    prev = state.extra.setdefault("prev_weights", flat_params(state.model))   # never trained: the initial model
    state.extra["z_prev"] = representation_of(state, prev)
    state.extra["z_glob"] = representation_of(state, global_weights)     # leaves the global weights loaded
    state.extra["moon_mu"], state.extra["moon_tau"] = p.mu, p.temperature
    g = torch.Generator().manual_seed(seed + state.cid)
    ce, con = objective_steps(state, steps_per_round(state, p), p.batch_size, g, contrastive_term)
    for k in ("z_prev", "z_glob"):
        del state.extra[k]
    state.extra["prev_weights"] = flat_params(state.model)
    delta = state_delta(state.model.state_dict(), global_weights)
    return delta, ce, con


@ALGORITHMS.register("moon", params=MoonParams, tasks=("node", "graph", "link"))
class Moon(FedAvg):
    @classmethod
    def check_config(cls, params, validated) -> None:
        super().check_config(params, validated)
        check_setting(params, validated, "moon")

    @classmethod
    def reduces_to(cls, params, top) -> str | None:
        return "fedavg: mu = 0" if params.mu == 0 else None

    def round(self, r: int) -> dict[str, float]:
        """FedAvg's round with MOON's client side; its diagnostic: μ·ℓ_con over the cross-entropy
        (mean over clients), the contrastive loss's share of the local objective."""
        chosen = [self.states[i] for i in self.sample_clients(r)]
        gw = self.ctx.channel.broadcast("global_weights", self.shared_weights(), [s.cid for s in chosen], r)
        results = self.ctx.executor.map(moon_client_update, chosen, gw, self.params, round_seed(self.ctx.seed, r))
        loss = self.apply_updates(chosen, [(d, ce) for d, ce, _ in results], r)
        con = mean_loss(c for _, _, c in results)
        stats = {"loss": loss}
        if con == con and loss == loss:
            stats["contrastive_loss"] = con
            stats["regulariser_share"] = stats["contrastive_loss"] / max(abs(loss), 1e-30)
        return stats

    def state_dict(self) -> dict:
        return {**super().state_dict(), "prev": [s.extra.get("prev_weights") for s in self.states]}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        for s, w in zip(self.states, state["prev"]):
            if w is not None:
                s.extra["prev_weights"] = w
