"""FedAvg (McMahan et al., 2017): sampled clients train K local steps from the global model and
send their update; the server averages updates (weighted by training items, or uniformly)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fgx.algorithms.base import (Algorithm, add_delta, aggregation_weights, copy_model, flat_params, mean_loss,
                                  zero_delta)
from fgx.config import spec
from fgx.federation.channel import Message
from fgx.federation.client import ClientState, LocalTrainParams, Objective, make_client_state
from fgx.registry import ALGORITHMS


@dataclass
class FedAvgParams(LocalTrainParams):
    client_fraction: float = field(default=1.0, metadata=spec(gt=0.0, max=1.0))
    client_sampling: str = field(default="fixed", metadata=spec(
        choices=["fixed", "poisson"],
        help="fixed: round(client_fraction * N) clients drawn per round; poisson: each client joins a round "
             "independently with probability client_fraction (what privacy=dp_fedavg's accountant assumes)"))
    weighting: str = field(default="train_items", metadata=spec(choices=["train_items", "uniform"]))


@ALGORITHMS.register("fedavg", params=FedAvgParams, tasks=("node", "edge", "graph", "link"))
class FedAvg(Algorithm):
    messages = {"global_weights": Message("down"), "update": Message("up", release=True)}
    down, up = "global_weights", "update"     # the kinds of the round's two messages (FedPer: its base's)
    has_local_models = True
    client_state: type[ClientState] = ClientState   # what a client keeps (SCAFFOLD: its control variate too)
    objective = Objective                           # its clients' objective adds nothing
    threat_hooks = True                             # its aggregate phase calls ctx.threat.tamper and ctx.aggregator

    def setup(self) -> None:
        self.views = self.make_views(include_cross=False)
        self.global_model = self.ctx.build_model()
        self.states = [make_client_state(self.ctx, c, self.views[c.cid], copy_model(self.global_model),
                                         self.client_state) for c in self.ctx.clients]

    def sample_clients(self, r: int) -> list[int]:
        """This round's clients (a Poisson draw may be empty)."""
        n, q = len(self.states), self.params.client_fraction
        if q >= 1.0:
            return list(range(n))
        g = torch.Generator().manual_seed(self.ctx.seed * 100003 + r)
        if self.params.client_sampling == "poisson":
            return (torch.rand(n, generator=g) < q).nonzero().view(-1).tolist()
        k = max(1, int(round(q * n)))
        return sorted(torch.randperm(n, generator=g)[:k].tolist())

    @classmethod
    def averages_updates_plainly(cls) -> bool:
        return cls.aggregate is FedAvg.aggregate and not cls.needs_individual_updates

    def select(self, r: int) -> list:
        return [self.states[i] for i in self.sample_clients(r)]

    def configure(self, chosen: list, r: int) -> dict[str, torch.Tensor]:
        """The global model (``shared_weights``) down to the chosen clients."""
        return self.ctx.channel.broadcast(self.down, self.shared_weights(), [s.cid for s in chosen], r)

    def shared_weights(self) -> dict[str, torch.Tensor]:
        """What the server sends down: the whole global model (FedStar: its structure encoder only)."""
        return flat_params(self.global_model)

    def aggregate(self, chosen: list, updates: list, r: int) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
        """The clients' updates go up the channel; their (weighted) average, which a privacy mechanism
        may noise (``channel.aggregate``), and the mean client loss. The updates as the server received
        them stay in ``self.received`` (chosen states, updates) for server-side steps that follow the
        average (FedTAD's distillation)."""
        ch = self.ctx.channel
        # a threat's malicious clients tamper with their updates, having seen the round's honest ones (threat=none:
        # as they are); the aggregator (aggregator=mean: weighted_average) combines what the server received
        sent = self.ctx.threat.tamper([s.cid for s in chosen], [u.delta for u in updates], r)
        secure = self.ctx.secure_aggregation
        if secure is not None and secure.active:     # the server learns the weighted average only
            self.received = None
            mean, stats = secure.average(ch, [s.cid for s in chosen], sent, aggregation_weights(
                chosen, self.params.weighting), r) if chosen else (zero_delta(self.shared_weights()), {})
            return mean, {"loss": mean_loss(u.loss.loss for u in updates), **stats}
        deltas = [ch.send(self.up, d, src=s.cid, dst="server", round=r) for s, d in zip(chosen, sent)]
        self.received = (chosen, deltas)
        # nobody sampled this round (Poisson): a zero update, which a DP mechanism still noises
        mean = self.ctx.aggregator(deltas, aggregation_weights(chosen, self.params.weighting)) if deltas else \
            zero_delta(self.shared_weights())
        return ch.aggregate(self.up, mean, len(chosen), r), {"loss": mean_loss(u.loss.loss for u in updates)}

    def server_update(self, mean: dict[str, torch.Tensor], r: int) -> dict[str, float]:
        """The global model moves by the averaged update."""
        add_delta(self.global_model, mean)
        return {}

    def model_for(self, client):
        return self.global_model

    def local_model_for(self, client):
        """The client's copy as its last local training left it (a client not sampled yet: the start weights)."""
        return self.states[client.cid].model

    def state_dict(self) -> dict:
        state = {"global": self.global_model.state_dict(),
                 "optimizers": [s.optimizer.state_dict() for s in self.states]}
        if self.ctx.config.top.eval_model == "local":   # what is scored must survive a resume
            state["client_models"] = [s.model.state_dict() for s in self.states]
        return state

    def load_state_dict(self, state: dict) -> None:
        self.global_model.load_state_dict(state["global"])
        local = state.get("client_models") or [state["global"]] * len(self.states)
        for s, o, m in zip(self.states, state["optimizers"], local):
            s.model.load_state_dict(m)
            s.optimizer.load_state_dict(o)
