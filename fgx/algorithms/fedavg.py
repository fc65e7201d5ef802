"""FedAvg (McMahan et al., 2017): sampled clients train K local steps from the global model and
send their update; the server averages updates (weighted by training items, or uniformly)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fgx.algorithms.base import (Algorithm, LocalTrainParams, add_delta, aggregation_weights, copy_model, flat_params,
                                 make_client_state, mean_loss, round_seed, state_delta, steps_per_round, train_steps,
                                 weighted_average, zero_delta)
from fgx.config import spec
from fgx.federation.channel import Message
from fgx.registry import ALGORITHMS


@dataclass
class FedAvgParams(LocalTrainParams):
    client_fraction: float = field(default=1.0, metadata=spec(gt=0.0, max=1.0))
    client_sampling: str = field(default="fixed", metadata=spec(
        choices=["fixed", "poisson"],
        help="fixed: round(client_fraction * N) clients drawn per round; poisson: each client joins a round "
             "independently with probability client_fraction (what privacy=dp_fedavg's accountant assumes)"))
    weighting: str = field(default="train_items", metadata=spec(choices=["train_items", "uniform"]))


def client_update(state, global_weights: dict, p: LocalTrainParams, round_seed: int):
    """Client side of one FedAvg round: start from the global weights, train, return the delta.
    Module-level (not a closure) so that any executor can ship it to where the client lives."""
    state.model.load_state_dict(global_weights, strict=False)   # a method sharing part of the model sends that part
    g = torch.Generator().manual_seed(round_seed + state.cid)
    loss = train_steps(state, steps_per_round(state, p), p.batch_size, g, state.extra.get("extra_loss"), p.fanouts)
    return state_delta(state.model.state_dict(), global_weights), loss


@ALGORITHMS.register("fedavg", params=FedAvgParams, tasks=("node", "edge", "graph", "link"))
class FedAvg(Algorithm):
    messages = {"global_weights": Message("down"), "update": Message("up", release=True)}
    down, up = "global_weights", "update"     # the kinds of the round's two messages (FedPer: its base's)
    has_local_models = True
    client_fn = staticmethod(client_update)   # subclasses (FedProx) swap the client side

    def setup(self) -> None:
        self.views = self.make_views(include_cross=False)
        self.global_model = self.ctx.build_model()
        self.states = [make_client_state(self.ctx, c, self.views[c.cid], copy_model(self.global_model))
                       for c in self.ctx.clients]

    def sample_clients(self, r: int) -> list[int]:
        """This round's clients (a Poisson draw may be empty)."""
        n, q = len(self.states), self.params.client_fraction
        if q >= 1.0:
            return list(range(n))
        g = torch.Generator().manual_seed(self.ctx.seed * 100003 + r)
        if getattr(self.params, "client_sampling", "fixed") == "poisson":
            return (torch.rand(n, generator=g) < q).nonzero().view(-1).tolist()
        k = max(1, int(round(q * n)))
        return sorted(torch.randperm(n, generator=g)[:k].tolist())

    def round(self, r: int) -> dict[str, float]:
        p, ch = self.params, self.ctx.channel
        chosen = [self.states[i] for i in self.sample_clients(r)]
        gw = ch.broadcast(self.down, self.shared_weights(), [s.cid for s in chosen], r)
        results = self.ctx.executor.map(type(self).client_fn, chosen, gw, p, round_seed(self.ctx.seed, r))
        return {"loss": self.apply_updates(chosen, results, r)}

    def shared_weights(self) -> dict[str, torch.Tensor]:
        """What the server sends down: the whole global model (FedStar: its structure encoder only)."""
        return flat_params(self.global_model)

    def apply_updates(self, chosen: list, results: list, r: int) -> float:
        """Server side: the clients' (update, loss) pairs go up the channel and their (weighted)
        average moves the global model. Returns the mean client loss. The updates as the server
        received them stay in ``self.received`` (chosen states, updates) for server-side steps that
        follow the average (FedTAD's distillation)."""
        p, ch = self.params, self.ctx.channel
        deltas = [ch.send(self.up, d, src=s.cid, dst="server", round=r) for s, (d, _) in zip(chosen, results)]
        self.received = (chosen, deltas)
        # nobody sampled this round (Poisson): a zero update, which a DP mechanism still noises
        mean = weighted_average(deltas, aggregation_weights(chosen, p.weighting)) if deltas else \
            zero_delta(self.shared_weights())
        add_delta(self.global_model, ch.aggregate(self.up, mean, len(chosen), r))
        return mean_loss(l for _, l in results)

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
