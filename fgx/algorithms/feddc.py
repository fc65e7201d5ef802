"""FedDC (Gao et al., CVPR 2022): federated learning with local drift decoupling and correction.

Client i keeps a drift variable h_i (the sum of its past updates) and a gradient state g_i; the server
keeps a global gradient state g. With w_i = n_i / mean_j n_j (relative size), α_i = α / w_i and
θ the local model, client i's local objective is

    CE + (α_i / 2)·‖θ − (w − h_i)‖² + ⟨θ, g/w_i − g_i⟩

(drift penalty, then gradient correction). After K steps of size lr: Δ_i = θ − w, h_i += Δ_i and
g_i ← g_i − g/w_i − Δ_i/(K·lr). The server sets w ← mean_{i∈S} θ_i + mean_{all j} h_j (the drift corrects
the average) and g ← g + (1/N)·Σ_{i∈S} (−g − w_i·Δ_i/(K·lr)). The server knows each h_j and the change of
g from the updates it receives, so Δ_i is the only upload.

Checked against the authors' code (gaoliang13/FedDC utils_methods_FedDC.py ``train_FedDC`` and
utils_general.py ``train_model_FedDC``: the uniform mean over the sampled clients plus the mean drift of
all clients, the state-gradient bookkeeping, gradient-norm clipping at 10; example_code_cifar10.py:
α = 0.01, SGD lr 0.1, weight decay 1e-3) and OpenFGL flcore/feddc."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from fgx.algorithms.base import mean_loss
from fgx.algorithms.fedavg import FedAvg, FedAvgParams
from fgx.algorithms.representation import check_setting
from fgx.config import ConfigError, spec
from fgx.federation.channel import Message
from fgx.federation.client import ClientState, Objective, num_train_items, steps_per_round
from fgx.registry import ALGORITHMS


@dataclass
class FedDCParams(FedAvgParams):
    alpha: float = field(default=0.01, metadata=spec(min=0.0, help="weight of the drift penalty (alpha_coef)"))
    max_grad_norm: float | None = field(default=10.0, metadata=spec(gt=0.0, help="gradient-norm clip; null: none"))


@dataclass
class FedDCClient(ClientState):
    h: dict | None = None            # the drift variable h_i, name -> tensor (None: zero)
    g_i: dict | None = None          # the gradient state g_i


@dataclass
class Drift(Objective):
    """(α_i/2)·‖θ − (w − h_i)‖² + ⟨θ, g/w_i − g_i⟩ over the model's parameters, gradients clipped to
    ``max_grad_norm`` (the authors' code); ``finish`` updates h_i and g_i from the round's update."""
    received: dict                   # client id -> its gradient-state message {"g", "relative_size"}
    p: FedDCParams
    weights: dict | None = None      # the round's start weights w
    alpha: float = 0.0               # α_i = α / w_i
    diff: dict | None = None         # g / w_i − g_i
    unbatched = "its drift penalty and correction are each client's own"

    def start(self, state, weights):
        names = [n for n, _ in state.model.named_parameters()]
        if state.h is None:
            state.h = {n: torch.zeros_like(weights[n]) for n in names}
        if state.g_i is None:
            state.g_i = {n: torch.zeros_like(weights[n]) for n in names}
        wi, g = self.received[state.cid]["relative_size"], self.received[state.cid]["g"]
        return Drift(self.received, self.p, weights, self.p.alpha / wi, {n: g[n] / wi - state.g_i[n] for n in names})

    def term(self, state, step):
        pen, cor = 0.0, 0.0
        for name, w in state.model.named_parameters():
            pen = pen + (w - (self.weights[name] - state.h[name])).pow(2).sum()
            cor = cor + (w * self.diff[name]).sum()
        return 0.5 * self.alpha * pen + cor

    def before_step(self, state):
        if self.p.max_grad_norm is not None:
            nn.utils.clip_grad_norm_(state.model.parameters(), self.p.max_grad_norm)

    def finish(self, state, delta):
        wi, g = self.received[state.cid]["relative_size"], self.received[state.cid]["g"]
        steps = steps_per_round(state, self.p)
        for n in state.h:
            state.h[n] += delta[n]
            state.g_i[n] = state.g_i[n] - g[n] / wi - delta[n] / (steps * self.p.lr)


@ALGORITHMS.register("feddc", params=FedDCParams, tasks=("node", "graph"))
class FedDC(FedAvg):
    """FedAvg's round with FedDC's client objective (``Drift``); the server averages uniformly, keeps
    each h_j and g (``aggregate``) and adds the mean drift to the average (``server_update``)."""
    messages = {"global_weights": Message("down"),
                "gradient_state": Message("down"),            # g and the client's relative size w_i
                "update": Message("up", release=True)}
    client_state = FedDCClient
    objective = Drift

    @classmethod
    def check_config(cls, params, validated) -> None:
        super().check_config(params, validated)
        check_setting(params, validated, "feddc")
        if params.weighting != "uniform":
            raise ConfigError("algorithm.weighting", params.weighting,
                              "uniform: FedDC averages the sampled clients' models uniformly (the authors' code)")

    def setup(self) -> None:
        super().setup()
        self.names = [n for n, _ in self.global_model.named_parameters()]
        zeros = {n: torch.zeros_like(w) for n, w in self.global_model.named_parameters()}
        self.g = {n: v.clone() for n, v in zeros.items()}
        self.h = [{n: v.clone() for n, v in zeros.items()} for _ in self.states]   # server's copy of each h_j
        sizes = [max(num_train_items(s), 1) for s in self.states]
        self.rel = [n * len(sizes) / sum(sizes) for n in sizes]

    def configure(self, chosen, r):
        return super().configure(chosen, r) if chosen else None     # an empty (Poisson) round sends nothing

    def client_objective(self, chosen, weights, r):
        # each client's own message, keyed by its id (the executor passes the same arguments to every client)
        ch = self.ctx.channel
        return Drift({s.cid: ch.send("gradient_state", {"g": {k: v.clone() for k, v in self.g.items()},
                                                        "relative_size": self.rel[s.cid]},
                                     src="server", dst=s.cid, round=r) for s in chosen}, self.params)

    def aggregate(self, chosen, updates, r):
        if not updates:
            return None, {"loss": float("nan")}
        p, ch = self.params, self.ctx.channel
        deltas = [ch.send("update", u.delta, src=s.cid, dst="server", round=r) for s, u in zip(chosen, updates)]
        # the authors' uniform mean Σd/m (weighted_average's Σ d·(1/m) rounds differently)
        mean = {k: sum(d[k] for d in deltas) / len(deltas) if deltas[0][k].is_floating_point() else deltas[0][k]
                for k in deltas[0]}
        mean = ch.aggregate("update", mean, len(chosen), r)          # a DP mechanism may noise it
        n = len(self.states)
        g_step = {k: torch.zeros_like(v) for k, v in self.g.items()}
        for s, d in zip(chosen, deltas):
            for k in self.names:
                self.h[s.cid][k] += d[k]
                g_step[k] += -self.g[k] - self.rel[s.cid] * d[k] / (steps_per_round(s, p) * p.lr)
        for k in self.names:
            self.g[k] += g_step[k] / n
        return mean, {"loss": mean_loss(u.loss.ce for u in updates)}

    def server_update(self, mean, r):
        """w ← w + mean update + the mean drift of all clients."""
        if mean is None:
            return {}
        n = len(self.states)
        drift = {k: sum(h[k] for h in self.h) / n for k in self.names}
        sd = self.global_model.state_dict()
        self.global_model.load_state_dict({k: (sd[k] + mean[k] + drift.get(k, 0.0)) if sd[k].is_floating_point()
                                           else mean[k] for k in mean}, strict=False)
        norm = lambda t: sum(float(v.double().pow(2).sum()) for v in t.values()) ** 0.5   # noqa: E731
        # diagnostic: how far the mean drift moves the global model beside the mean update
        return {"drift_to_update": norm(drift) / max(norm({k: mean[k] for k in self.names}), 1e-30)}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "g": self.g, "h": self.h,
                "client": [{"h": s.h, "g_i": s.g_i} for s in self.states]}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.g, self.h = state["g"], state["h"]
        for s, c in zip(self.states, state["client"]):
            s.h = c["h"] if c.get("h") is not None else s.h
            s.g_i = c["g_i"] if c.get("g_i") is not None else s.g_i
