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

from fgx.algorithms.base import mean_loss, num_train_items, round_seed, state_delta, steps_per_round
from fgx.algorithms.fedavg import FedAvg, FedAvgParams
from fgx.algorithms.representation import check_setting, objective_steps
from fgx.config import ConfigError, spec
from fgx.federation.channel import Message
from fgx.registry import ALGORITHMS


@dataclass
class FedDCParams(FedAvgParams):
    alpha: float = field(default=0.01, metadata=spec(min=0.0, help="weight of the drift penalty (alpha_coef)"))
    max_grad_norm: float | None = field(default=10.0, metadata=spec(gt=0.0, help="gradient-norm clip; null: none"))


def drift_terms(state, rep, logits, batch, y):
    """(α_i/2)·‖θ − (w − h_i)‖² + ⟨θ, g/w_i − g_i⟩ over the model's parameters."""
    x = state.extra["feddc"]
    pen, cor = 0.0, 0.0
    for name, w in state.model.named_parameters():
        pen = pen + (w - (x["global"][name] - x["h"][name])).pow(2).sum()
        cor = cor + (w * x["diff"][name]).sum()
    return 0.5 * x["alpha"] * pen + cor


def feddc_client_update(state, global_weights: dict, received: dict, p: FedDCParams, seed: int):
    """Local training with the drift penalty and the gradient correction; returns (Δ, CE, terms).
    ``received``: each sampled client's gradient-state message by client id (this client reads its own)."""
    server_state = received[state.cid]
    state.model.load_state_dict(global_weights, strict=False)
    names = [n for n, _ in state.model.named_parameters()]
    h = state.extra.setdefault("h", {n: torch.zeros_like(global_weights[n]) for n in names})
    gi = state.extra.setdefault("g_i", {n: torch.zeros_like(global_weights[n]) for n in names})
    wi, g = server_state["relative_size"], server_state["g"]
    state.extra["feddc"] = {"global": global_weights, "h": h, "alpha": p.alpha / wi,
                            "diff": {n: g[n] / wi - gi[n] for n in names}}
    steps = steps_per_round(state, p)
    gen = torch.Generator().manual_seed(seed + state.cid)
    ce, terms = objective_steps(state, steps, p.batch_size, gen, drift_terms, max_grad_norm=p.max_grad_norm)
    del state.extra["feddc"]
    delta = state_delta(state.model.state_dict(), global_weights)
    for n in names:
        h[n] += delta[n]
        gi[n] = gi[n] - g[n] / wi - delta[n] / (steps * p.lr)
    return delta, ce, terms


@ALGORITHMS.register("feddc", params=FedDCParams, tasks=("node", "graph"))
class FedDC(FedAvg):
    messages = {"global_weights": Message("down"),
                "gradient_state": Message("down"),            # g and the client's relative size w_i
                "update": Message("up", release=True)}

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

    def round(self, r: int) -> dict[str, float]:
        p, ch = self.params, self.ctx.channel
        chosen = [self.states[i] for i in self.sample_clients(r)]
        if not chosen:
            return {"loss": float("nan")}
        gw = ch.broadcast("global_weights", self.shared_weights(), [s.cid for s in chosen], r)
        # each client's own message, keyed by its id (the executor passes the same arguments to every client)
        ss = {s.cid: ch.send("gradient_state", {"g": {k: v.clone() for k, v in self.g.items()}, "relative_size": self.rel[s.cid]}, src="server",
                             dst=s.cid, round=r) for s in chosen}
        results = self.ctx.executor.map(feddc_client_update, chosen, gw, ss, p, round_seed(self.ctx.seed, r))
        deltas = [ch.send("update", d, src=s.cid, dst="server", round=r) for s, (d, _, _) in zip(chosen, results)]
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
        drift = {k: sum(h[k] for h in self.h) / n for k in self.names}
        sd = self.global_model.state_dict()
        self.global_model.load_state_dict({k: (sd[k] + mean[k] + drift.get(k, 0.0)) if sd[k].is_floating_point()
                                           else mean[k] for k in mean}, strict=False)
        norm = lambda t: sum(float(v.double().pow(2).sum()) for v in t.values()) ** 0.5   # noqa: E731
        # diagnostic: how far the mean drift moves the global model beside the mean update
        return {"loss": mean_loss(ce for _, ce, _ in results),
                "drift_to_update": norm(drift) / max(norm({k: mean[k] for k in self.names}), 1e-30)}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "g": self.g, "h": self.h,
                "client": [{k: s.extra.get(k) for k in ("h", "g_i")} for s in self.states]}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.g, self.h = state["g"], state["h"]
        for s, c in zip(self.states, state["client"]):
            s.extra.update({k: v for k, v in c.items() if v is not None})
