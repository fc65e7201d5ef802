"""SCAFFOLD (Karimireddy et al., ICML 2020), option II control variates.

The server keeps a control variate c, each client i its own c_i (both zero at the start, one tensor per
model parameter). A sampled client starts from the global weights x, takes K local steps on its
corrected gradient g + c - c_i, then sets c_i+ = c_i - c + (x - y_i) / (K·lr) (option II) and sends
Δy_i = y_i - x and Δc_i = c_i+ - c_i. The server moves x by the global learning rate times the mean
Δy over the sampled clients S (uniform, Alg. 1's (1/|S|)ΣΔy_i; ``weighting: train_items`` weights it by
training items, as OpenFGL and PFLlib do) and c by (|S|/N)·(1/|S|)ΣΔc_i = (1/N)·ΣΔc_i over S.
Option II reads (x - y_i)/(K·lr) as the mean gradient of K plain SGD steps, so any other local solver
is refused before work starts.

Checked against the authors' pseudo-code (Alg. 1) and the codes FGL papers run: TsingZ0/PFLlib
clientscaffold.py and xkLi-Allen/OpenFGL flcore/scaffold/{client,server}.py (the correction added to
the gradient before the optimiser step; c_i's option-II update divided by K·lr)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fgx.algorithms.base import add_delta
from fgx.algorithms.fedavg import FedAvg, FedAvgParams
from fgx.algorithms.representation import check_setting
from fgx.config import ConfigError, spec
from fgx.federation.channel import Message
from fgx.federation.client import ClientState, Objective, steps_per_round
from fgx.registry import ALGORITHMS


@dataclass
class ScaffoldParams(FedAvgParams):
    optimizer: str = field(default="sgd", metadata=spec(
        choices=["adam", "sgd"], help="sgd only: option II's c_i = (x - y_i)/(K lr) is the mean gradient of K SGD steps"))
    weighting: str = field(default="uniform", metadata=spec(
        choices=["train_items", "uniform"], help="the mean of the sampled updates: uniform (the paper's Alg. 1) or "
                                                 "by training items (OpenFGL, PFLlib)"))
    global_lr: float = field(default=1.0, metadata=spec(gt=0.0, help="server step size eta_g on the mean update"))


@dataclass
class ScaffoldClient(ClientState):
    c_i: dict | None = None          # the client's control variate, name -> tensor (None: zero, never trained)


@dataclass
class Corrected(Objective):
    """K steps on the corrected gradient g + c - c_i, then option II's c_i+ = c_i - c + (x - y_i)/(K lr);
    ``finish`` returns Δc_i = c_i+ - c_i, which goes up beside the update."""
    c: dict                          # the server's control variate as the client received it
    p: ScaffoldParams
    correction: dict | None = None   # c - c_i of this client
    unbatched = "its gradient correction c - c_i is each client's own"

    def start(self, state, weights):
        if state.c_i is None:
            state.c_i = {k: torch.zeros_like(v) for k, v in self.c.items()}
        return Corrected(self.c, self.p, {k: self.c[k] - state.c_i[k] for k in self.c})

    def before_step(self, state):
        for name, w in state.model.named_parameters():
            if w.grad is not None:
                w.grad.add_(self.correction[name])

    def finish(self, state, delta):
        ci, c = state.c_i, self.c
        ci_new = {k: ci[k] - c[k] - delta[k] / (steps_per_round(state, self.p) * self.p.lr) for k in c}
        state.c_i = ci_new
        return {k: ci_new[k] - ci[k] for k in c}


@ALGORITHMS.register("scaffold", params=ScaffoldParams, tasks=("node", "graph", "link"))
class Scaffold(FedAvg):
    """FedAvg's round with SCAFFOLD's client objective (``Corrected``), the control updates beside the
    model updates (``aggregate``) and the server step x + η_g·mean Δy (``server_update``)."""
    messages = {"global_weights": Message("down"), "global_control": Message("down"),
                "update": Message("up", release=True),
                # Δc_i = -c - Δy_i/(K lr): a function of the client's update and c (what the server sent),
                # sent separately, so a budget must cover it too (dp_fedavg covers 'update' only)
                "control_update": Message("up", release=True)}

    client_state = ScaffoldClient
    objective = Corrected

    @classmethod
    def check_config(cls, params, validated) -> None:
        super().check_config(params, validated)
        check_setting(params, validated, "scaffold")
        if params.optimizer != "sgd":
            raise ConfigError("algorithm.optimizer", params.optimizer,
                              "sgd with algorithm=scaffold (option II's control variate c_i = (x - y_i)/(K lr) is the "
                              "mean gradient of K plain SGD steps; another optimiser's steps make it estimate nothing)")

    def setup(self) -> None:
        super().setup()
        self.c = {k: torch.zeros_like(v) for k, v in self.global_model.named_parameters()}

    def client_objective(self, chosen, weights, r):
        gc = self.ctx.channel.broadcast("global_control", {k: v.detach().clone() for k, v in self.c.items()},
                                        [s.cid for s in chosen], r)
        return Corrected(gc, self.params)

    threat_hooks = True     # its aggregate is FedAvg's (super) plus its own bookkeeping

    def aggregate(self, chosen, updates, r):
        """FedAvg's average of the updates (``weighting``); c moves by (|S|/N)·mean_S Δc_i = (1/N)·Σ_S Δc_i
        (Alg. 1: the clients not sampled keep their c_j, so c stays the mean of all N)."""
        mean, stats = super().aggregate(chosen, updates, r)
        n = len(self.states)
        for s, u in zip(chosen, updates):
            dc = self.ctx.channel.send("control_update", u.sent, src=s.cid, dst="server", round=r)
            for k in self.c:
                self.c[k] += dc[k] / n
        return mean, stats

    def server_update(self, mean, r):
        add_delta(self.global_model, mean if self.params.global_lr == 1.0 else
                  {k: self.params.global_lr * v if v.is_floating_point() else v for k, v in mean.items()})
        # diagnostic: ‖c‖, the server's control variate (zero: SCAFFOLD is FedAvg)
        return {"control_variate_norm": sum(float(v.double().pow(2).sum()) for v in self.c.values()) ** 0.5}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "c": self.c, "c_i": [s.c_i for s in self.states]}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.c = state["c"]
        for s, ci in zip(self.states, state["c_i"]):
            if ci is not None:
                s.c_i = ci
