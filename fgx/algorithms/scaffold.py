"""SCAFFOLD (Karimireddy et al., ICML 2020), option II control variates.

The server keeps a control variate c, each client i its own c_i (both zero at the start, one tensor per
model parameter). A sampled client starts from the global weights x, takes K local steps on its
corrected gradient g + c - c_i, then sets c_i+ = c_i - c + (x - y_i) / (K·lr) (option II) and sends
Δy_i = y_i - x and Δc_i = c_i+ - c_i. The server moves x by the global learning rate times the mean
Δy and c by (1/N)·ΣΔc_i over the sampled clients.

Checked against the authors' pseudo-code (Alg. 1) and the codes FGL papers run: TsingZ0/PFLlib
clientscaffold.py and xkLi-Allen/OpenFGL flcore/scaffold/{client,server}.py (the correction added to
the gradient before the optimiser step; c_i's option-II update divided by K·lr)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fgx.algorithms.base import round_seed, state_delta, steps_per_round
from fgx.algorithms.fedavg import FedAvg, FedAvgParams
from fgx.algorithms.representation import check_setting, objective_steps
from fgx.config import spec
from fgx.federation.channel import Message
from fgx.registry import ALGORITHMS


@dataclass
class ScaffoldParams(FedAvgParams):
    global_lr: float = field(default=1.0, metadata=spec(gt=0.0, help="server step size eta_g on the mean update"))


def correct_gradients(state) -> None:
    """g <- g + c - c_i: SCAFFOLD's gradient correction (module-level so executors can ship it)."""
    corr = state.extra["correction"]
    for name, w in state.model.named_parameters():
        if w.grad is not None:
            w.grad.add_(corr[name])


def scaffold_client_update(state, global_weights: dict, c: dict, p: ScaffoldParams, seed: int):
    """K corrected steps from the global weights; returns (Δy, mean loss, Δc)."""
    state.model.load_state_dict(global_weights, strict=False)
    ci = state.extra.setdefault("c_i", {k: torch.zeros_like(v) for k, v in c.items()})
    state.extra["correction"] = {k: c[k] - ci[k] for k in c}
    steps = steps_per_round(state, p)
    g = torch.Generator().manual_seed(seed + state.cid)
    loss, _ = objective_steps(state, steps, p.batch_size, g, before_step=correct_gradients)
    delta = state_delta(state.model.state_dict(), global_weights)
    # option II: c_i+ = c_i - c + (x - y_i) / (K lr)
    ci_new = {k: ci[k] - c[k] - delta[k] / (steps * p.lr) for k in c}
    dc = {k: ci_new[k] - ci[k] for k in c}
    state.extra["c_i"] = ci_new
    return delta, loss, dc


@ALGORITHMS.register("scaffold", params=ScaffoldParams, tasks=("node", "graph", "link"))
class Scaffold(FedAvg):
    messages = {"global_weights": Message("down"), "global_control": Message("down"),
                "update": Message("up", release=True),
                # Δc_i = -c - Δy_i/(K lr): a function of the client's update and c (what the server sent),
                # sent separately, so a budget must cover it too (dp_fedavg covers 'update' only)
                "control_update": Message("up", release=True)}

    @classmethod
    def check_config(cls, params, validated) -> None:
        super().check_config(params, validated)
        check_setting(params, validated, "scaffold")

    def setup(self) -> None:
        super().setup()
        self.c = {k: torch.zeros_like(v) for k, v in self.global_model.named_parameters()}

    def round(self, r: int) -> dict[str, float]:
        p, ch = self.params, self.ctx.channel
        chosen = [self.states[i] for i in self.sample_clients(r)]
        dsts = [s.cid for s in chosen]
        gw = ch.broadcast("global_weights", self.shared_weights(), dsts, r)
        gc = ch.broadcast("global_control", {k: v.detach().clone() for k, v in self.c.items()}, dsts, r)
        results = self.ctx.executor.map(scaffold_client_update, chosen, gw, gc, p, round_seed(self.ctx.seed, r))
        before = {k: v.clone() for k, v in self.global_model.state_dict().items()}
        loss = self.apply_updates(chosen, [(d, l) for d, l, _ in results], r)   # x + mean Δy
        if p.global_lr != 1.0:       # x + eta_g · mean Δy
            now = self.global_model.state_dict()
            self.global_model.load_state_dict({k: before[k] + p.global_lr * (now[k] - before[k])
                                               if now[k].is_floating_point() else now[k] for k in now})
        n = len(self.states)
        for s, (_, _, dc) in zip(chosen, results):
            dc = ch.send("control_update", dc, src=s.cid, dst="server", round=r)
            for k in self.c:
                self.c[k] += dc[k] / n
        # diagnostic: ‖c‖, the server's control variate (zero: SCAFFOLD is FedAvg)
        return {"loss": loss, "control_variate_norm": sum(float(v.double().pow(2).sum()) for v in self.c.values()) ** 0.5}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "c": self.c, "c_i": [s.extra.get("c_i") for s in self.states]}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.c = state["c"]
        for s, ci in zip(self.states, state["c_i"]):
            if ci is not None:
                s.extra["c_i"] = ci
