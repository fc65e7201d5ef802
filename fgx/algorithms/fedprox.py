"""FedProx (Li et al., MLSys 2020): FedAvg whose local objective adds the proximal term
(mu/2)·||w - w_global||² over the model parameters, keeping local models near the global one.
mu = 0 is FedAvg exactly (tests/test_baselines.py). The round is FedAvg's; FedProx changes the
client side only (``client_fn``), and says when it reduces to FedAvg (``reduces_to``)."""
from __future__ import annotations

from dataclasses import dataclass, field

from fgx.algorithms.fedavg import FedAvg, FedAvgParams, client_update
from fgx.config import spec
from fgx.registry import ALGORITHMS


@dataclass
class FedProxParams(FedAvgParams):
    mu: float = field(default=0.01, metadata=spec(min=0.0, help="proximal coefficient mu"))


def proximal_term(state):
    """(mu/2)·||w - w_global||² with w_global fixed at the weights the round started from.
    Module-level so that executors can pickle the client state that refers to it."""
    anchor = state.extra["prox_anchor"]
    return 0.5 * state.extra["prox_mu"] * sum(((w - anchor[n]) ** 2).sum() for n, w in state.model.named_parameters())


def prox_client_update(state, global_weights: dict, p: FedProxParams, round_seed: int):
    """FedAvg's client update with the proximal term added to the local loss."""
    names = {n for n, _ in state.model.named_parameters()}
    state.extra.update(prox_anchor={k: v.detach().clone() for k, v in global_weights.items() if k in names},
                       prox_mu=p.mu, extra_loss=proximal_term)
    return client_update(state, global_weights, p, round_seed)


@ALGORITHMS.register("fedprox", params=FedProxParams, tasks=("node", "edge", "graph", "link"))
class FedProx(FedAvg):
    client_fn = staticmethod(prox_client_update)

    @classmethod
    def reduces_to(cls, params, top) -> str | None:
        if params.mu == 0:
            return "fedavg: mu = 0"
        one_step = params.local_steps == 1 if params.local_epochs is None else \
            (params.local_epochs == 1 and params.batch_size is None)
        if one_step:
            return "fedavg: with one local step the proximal term's gradient is zero at the global weights"
        return None

    def round(self, r: int) -> dict[str, float]:
        """FedAvg's round; its diagnostic: the proximal term at the end of local training,
        (μ/2)·‖Δ_i‖² of each received update, mean over clients, against the mean training loss."""
        stats = super().round(r)
        names = {n for n, _ in self.global_model.named_parameters()}
        prox = [0.5 * self.params.mu * sum(float(v.double().pow(2).sum()) for k, v in d.items() if k in names)
                for d in self.received[1]]
        if prox and stats["loss"] == stats["loss"]:
            stats["regulariser_share"] = (sum(prox) / len(prox)) / max(abs(stats["loss"]), 1e-30)
        return stats
