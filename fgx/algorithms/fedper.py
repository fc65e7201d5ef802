"""FedPer (Arivazhagan et al., 2019): the base layers are federated with FedAvg; each client keeps
its own classification head ("personalisation layers"), which never leaves the client. The model's
last layer is the head by default (fedgsp spec §5: "each client keeps its own classification layer"):
its linear classifier, or its last convolution when it has none (``model.classifier=none``)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fgx.algorithms.base import flat_params
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


@ALGORITHMS.register("fedper", params=FedPerParams, tasks=("node", "link"))
class FedPer(FedAvg):
    """FedAvg's round over the base only: the server sends the base, clients load it under their own
    head (FedAvg's client side loads what it gets), train, and send the base's update."""
    messages = {"global_base": Message("down"), "base_update": Message("up", release=True)}
    down, up = "global_base", "base_update"

    def setup(self) -> None:
        super().setup()
        self.head = head_keys(self.global_model, self.params.head_layers)

    def shared_weights(self) -> dict[str, torch.Tensor]:
        return {k: v for k, v in flat_params(self.global_model).items() if k not in self.head}

    def model_for(self, client):
        """The client's model: the latest shared base under its own head."""
        model = self.states[client.cid].model
        model.load_state_dict(self.shared_weights(), strict=False)
        return model

    def state_dict(self) -> dict:
        return {**super().state_dict(), "models": [s.model.state_dict() for s in self.states]}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        for s, m in zip(self.states, state["models"]):
            s.model.load_state_dict(m)
