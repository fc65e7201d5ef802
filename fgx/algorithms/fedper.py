"""FedPer (Arivazhagan et al., 2019): the base layers are federated with FedAvg; each client keeps
its own classification head ("personalisation layers"), which never leaves the client. The model's
last layer is the head by default (fedgsp spec §5: "each client keeps its own classification layer"):
its linear classifier, or its last convolution when it has none (``model.classifier=none``)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fgx.algorithms.base import flat_params, num_train_items, round_seed, steps_per_round, train_steps, \
    weighted_average
from fgx.algorithms.fedavg import FedAvg, FedAvgParams
from fgx.config import ConfigError, spec
from fgx.federation.channel import Message
from fgx.registry import ALGORITHMS


@dataclass
class FedPerParams(FedAvgParams):
    head_layers: int = field(default=1, metadata=spec(
        min=1, help="the last N layers (the classifier counts as one) form the personal head (never sent)"))


def head_keys(model: torch.nn.Module, head_layers: int) -> set[str]:
    """State-dict keys of the model's last ``head_layers`` layers (the model lists its layers, input to
    output, in ``layer_prefixes``: a GCN's convolutions then its classifier, UniFilter's MLP layers)."""
    if not hasattr(model, "layer_prefixes"):
        raise ConfigError("algorithm.name", "fedper", "a model that lists its layers (gcn, sage, gin, unifilter)")
    layers = model.layer_prefixes()
    if head_layers >= len(layers):
        raise ConfigError("algorithm.head_layers", head_layers,
                          f"< the model's {len(layers)} layers: something must be shared")
    prefixes = tuple(layers[len(layers) - head_layers:])
    return {k for k in model.state_dict() if k.startswith(prefixes)}


def fedper_client_update(state, base_weights: dict, p: FedPerParams, round_seed: int):
    """Load the shared base into the client's model (its head stays), train, return the base delta."""
    sd = state.model.state_dict()
    sd.update(base_weights)
    state.model.load_state_dict(sd)
    g = torch.Generator().manual_seed(round_seed + state.cid)
    loss = train_steps(state, steps_per_round(state, p), p.batch_size, g, None, p.fanouts)
    new = state.model.state_dict()
    delta = {k: (new[k] - base_weights[k]) if new[k].is_floating_point() else new[k].clone() for k in base_weights}
    return delta, loss


@ALGORITHMS.register("fedper", params=FedPerParams, tasks=("node",))
class FedPer(FedAvg):
    messages = {"global_base": Message("down"), "base_update": Message("up", release=True)}

    def setup(self) -> None:
        super().setup()
        self.head = head_keys(self.global_model, self.params.head_layers)

    def base(self) -> dict[str, torch.Tensor]:
        return {k: v for k, v in flat_params(self.global_model).items() if k not in self.head}

    def round(self, r: int) -> dict[str, float]:
        p, ch = self.params, self.ctx.channel
        chosen = [self.states[i] for i in self.sample_clients(r)]
        if not chosen:      # an empty Poisson draw: nothing to average this round
            return {"loss": float("nan")}
        bw = ch.broadcast("global_base", self.base(), [s.cid for s in chosen], r)
        results = self.ctx.executor.map(fedper_client_update, chosen, bw, p, round_seed(self.ctx.seed, r))
        deltas = [ch.send("base_update", d, src=s.cid, dst="server", round=r) for s, (d, _) in zip(chosen, results)]
        weights = [num_train_items(s) if p.weighting == "train_items" else 1.0 for s in chosen]
        if sum(weights) == 0:
            weights = [1.0] * len(chosen)
        avg = ch.aggregate("base_update", weighted_average(deltas, weights), len(chosen), r)
        gs = self.global_model.state_dict()
        gs.update({k: (gs[k] + avg[k]) if gs[k].is_floating_point() else avg[k] for k in avg})
        self.global_model.load_state_dict(gs)
        losses = [l for _, l in results if l == l]
        return {"loss": float(sum(losses) / len(losses)) if losses else float("nan")}

    def model_for(self, client):
        """The client's model: the latest shared base under its own head."""
        model = self.states[client.cid].model
        sd = model.state_dict()
        sd.update(self.base())
        model.load_state_dict(sd)
        return model

    def state_dict(self) -> dict:
        return {**super().state_dict(), "models": [s.model.state_dict() for s in self.states]}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        for s, m in zip(self.states, state["models"]):
            s.model.load_state_dict(m)
