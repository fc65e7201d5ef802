"""FedProx (Li et al., MLSys 2020): FedAvg whose local objective adds the proximal term
(mu/2)·||w - w_global||² over the model parameters, keeping local models near the global one.
mu = 0 is FedAvg exactly (tests/test_baselines.py). The round is FedAvg's; FedProx changes the
client objective only (``client_objective``), and says when it reduces to FedAvg (``reduces_to``)."""
from __future__ import annotations

from dataclasses import dataclass, field

from fgx.algorithms.fedavg import FedAvg, FedAvgParams
from fgx.config import spec
from fgx.federation.client import Objective
from fgx.federation.robust import flatten
from fgx.registry import ALGORITHMS


@dataclass
class FedProxParams(FedAvgParams):
    mu: float = field(default=0.01, metadata=spec(min=0.0, help="proximal coefficient mu"))


@dataclass
class Proximal(Objective):
    """(mu/2)·||w - w_global||², w_global (``anchor``: name -> tensor) the weights the round started from."""
    mu: float
    anchor: dict
    vanishes_at_start = True     # the anchor is what the clients load

    def term(self, state, step):
        return 0.5 * self.mu * sum(((w - self.anchor[n]) ** 2).sum() for n, w in state.model.named_parameters())

    def batched_term(self, params):      # params: name -> [C, ...]; the anchor is every client's
        return 0.5 * self.mu * sum(((w - self.anchor[n].unsqueeze(0)) ** 2).flatten(1).sum(1)
                                   for n, w in params.items() if n in self.anchor)


@ALGORITHMS.register("fedprox", params=FedProxParams, tasks=("node", "edge", "graph", "link"))
class FedProx(FedAvg):
    objective, threat_hooks = Proximal, True   # threat_hooks: its aggregate is FedAvg's (super) plus a diagnostic

    def client_objective(self, chosen, weights, r):
        return Proximal(self.params.mu, weights)

    @classmethod
    def reduces_to(cls, params, top) -> str | None:
        if params.mu == 0:
            return "fedavg: mu = 0"
        return "fedavg: with one local step the proximal term's gradient is zero at the global weights" \
            if params.one_local_step() else None


    def aggregate(self, chosen, updates, r):
        """FedAvg's; its diagnostic: the proximal term at the end of local training, (μ/2)·‖Δ_i‖² of
        each received update, mean over clients, against the mean training loss."""
        mean, stats = super().aggregate(chosen, updates, r)
        names = {n for n, _ in self.global_model.named_parameters()}
        if self.received[1] and stats["loss"] == stats["loss"]:
            vecs, _ = flatten([{k: v for k, v in d.items() if k in names} for d in self.received[1]])
            stats["regulariser_share"] = 0.5 * self.params.mu * float(vecs.double().square().sum(1).mean()) / max(abs(stats["loss"]), 1e-30)
        return mean, stats
