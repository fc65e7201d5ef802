"""Decentralised SGD with (optionally correlated) local noise over a gossip graph (Bellet et al.
2025, Algorithm 1 MF-D-SGD): each round every node takes one clipped, noised gradient step on its
next batch, sends its half-step model θ_{t+½} to its neighbours (channel kind ``model``), and
averages what it receives with the gossip matrix W. ``gossip_steps`` K > 1 repeats the averaging
(Muffliato-SGD).

Variants (one name each): dsgd (no noise), dp_dsgd (independent noise, C = I), antipgd
(C_local = tril(1)), dmf (centralised multi-epoch MF applied locally), mafalda_sgd (C_local
optimised for the gossip workload), muffliato (independent noise, K gossip steps).

Participation is (k, b) cyclic: a node's training rows are split into b equal batches used in turn,
so T = rounds = k·b and each record enters k steps. Noise: z ~ N(0, (clip·sens/μ)²) per node and
step, n = C_local^{-1} z added to the batch-mean gradient (÷ batch size): the whole run is μ-GDP
under LDP (Theorem 7), reported as (ε, δ) in mf_privacy.jsonl and metrics.jsonl."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from fgx.config import ConfigError, spec
from fgx.federation.channel import Message
from fgx.algorithms.base import Algorithm
from fgx.registry import ALGORITHMS


@dataclass
class GossipParams:
    lr: float = field(default=0.1, metadata=spec(gt=0.0))
    clip: float = field(default=1.0, metadata=spec(gt=0.0, help="per-sample gradient L2 bound"))
    gossip: str = field(default="uniform", metadata=spec(choices=["uniform", "metropolis_hastings"]))
    gossip_steps: int = field(default=1, metadata=spec(min=1, help="K averaging steps per gradient (Muffliato)"))
    k: int = field(default=5, metadata=spec(min=1, help="participations of each record (epochs); rounds = k*b"))
    b: int = field(default=4, metadata=spec(min=1, help="batches per node per epoch (participation separation)"))
    mu: float = field(default=1.0, metadata=spec(gt=0.0, help="μ-GDP target of the whole run (LDP)"))
    delta: float = field(default=1e-6, metadata=spec(gt=0.0, max=1.0))
    solver_max_iter: int = field(default=2000, metadata=spec(min=1))
    solver_tol: float = field(default=1e-8, metadata=spec(gt=0.0))


class GossipSGD(Algorithm):
    messages = {"model": Message("peer")}
    correlation: str | None = "identity"    # None: no noise

    @classmethod
    def check_config(cls, params, validated) -> None:
        if validated.names["partitioner"] != "topology":
            raise ConfigError("partitioner", validated.names["partitioner"],
                              "topology (decentralised algorithms need the communication graph)")
        if validated.names["privacy"] != "none":
            raise ConfigError("privacy", validated.names["privacy"],
                              "none (the gossip algorithms add their own local noise: algorithm.mu)")
        if validated.top.rounds != params.k * params.b:
            raise ConfigError("rounds", validated.top.rounds, f"algorithm.k * algorithm.b = {params.k * params.b}")

    def setup(self) -> None:
        from fgx.decentral.runtime import CorrelatedNoise, FlatModel
        from fgx.decentral.topology import TopologyParams, build_graph, gossip_matrix
        from omegaconf import OmegaConf

        p, ctx = self.params, self.ctx
        tp = {k: v for k, v in OmegaConf.to_container(ctx.cfg.partitioner, resolve=True).items() if k != "name"}
        self.graph = build_graph(TopologyParams(**tp))
        w = gossip_matrix(self.graph, p.gossip)
        dev = ctx.device                 # all n node models, data and W live on one device
        self.w = torch.tensor(w, dtype=torch.float32, device=dev)
        self.n = len(w)
        self.neighbours = [[int(j) for j in np.nonzero(w[u])[0] if j != u] for u in range(self.n)]
        self.flat = FlatModel(ctx.build_model())
        self.theta = self.flat.initial().to(dev).unsqueeze(0).repeat(self.n, 1)
        d = self.theta.size(1)
        # each node's training rows, split into b equal batches (rows past b*B never take part)
        rows = [c.data.x[c.data.train_mask[: c.num_owned]] for c in ctx.clients]
        ys = [c.data.y[c.data.train_mask[: c.num_owned]] for c in ctx.clients]
        self.batch = min(len(r) for r in rows) // p.b
        if self.batch < 1:
            raise ConfigError("algorithm.b", p.b, f"<= the smallest node's training rows ({min(len(r) for r in rows)})")
        self.x = torch.stack([r[: p.b * self.batch] for r in rows]).view(self.n, p.b, self.batch, -1).to(dev)
        self.y = torch.stack([y[: p.b * self.batch] for y in ys]).view(self.n, p.b, self.batch).to(dev)
        test = ctx.global_data.test_mask
        self.x_test, self.y_test = ctx.global_data.x[test].to(dev), ctx.global_data.y[test].to(dev)
        self.noise, self.account = None, {"correlation": self.correlation, "mu": None, "epsilon": None}
        if self.correlation is not None:
            from fgx.privacy.mf.correlations import build_correlation
            from fgx.privacy.mf.gdp import eps_from_mu, rdp_from_mu

            corr = build_correlation(self.correlation, w, p.k, p.b, p.solver_max_iter, p.solver_tol)
            std = p.clip * np.sqrt(corr.sens2) / p.mu
            self.noise = CorrelatedNoise(corr.noise_mixer, (self.n, d), std, ctx.seed * 7_777_777 + 1)
            self.account = {"correlation": corr.name, "trust_model": "ldp", "participation": {"k": p.k, "b": p.b},
                            "sens2": corr.sens2, "noise_std_per_coordinate": std, "mu": p.mu, "delta": p.delta,
                            "epsilon": eps_from_mu(p.mu, p.delta), "rdp_alpha2": rdp_from_mu(p.mu, 2.0),
                            "surrogate_objective": corr.objective, "solver_s": corr.solve_s,
                            "solver_iterations": corr.iterations}
        ctx.log.info("%s: %d nodes, batch %d, T = %d; privacy %s", type(self).__name__, self.n, self.batch,
                     p.k * p.b, self.account)

    def round(self, r: int) -> dict[str, float]:
        from fgx.decentral.runtime import clip_and_average

        p, t = self.params, r - 1
        if r == 1:
            self.ctx.record("mf_privacy", dict(self.account))
        j = t % p.b
        x, y = self.x[:, j], self.y[:, j]
        with torch.no_grad():
            loss = float((torch.vmap(self.flat.predict)(self.theta, x) - y).pow(2).mean())
        g = clip_and_average(self.flat.per_sample_grads(self.theta, x, y).detach(), p.clip)
        if self.noise is not None:
            g = g + self.noise.step(t).to(g.device) / self.batch     # drawn on the CPU: same noise on every device
        half = self.theta - p.lr * g
        for _ in range(p.gossip_steps):
            received = torch.zeros_like(half)
            for u in range(self.n):
                for v in self.neighbours[u]:
                    msg = self.ctx.channel.send("model", half[u], src=u, dst=v, round=r)
                    received[v] += self.w[v, u] * msg
            half = received + self.w.diagonal().unsqueeze(1) * half
        self.theta = half
        out = {"loss": loss}
        if self.account.get("epsilon") is not None:
            out["epsilon"] = self.account["epsilon"]
        return out

    def client_metrics(self, client) -> dict:
        u = client.cid
        with torch.no_grad():
            test = float((self.flat.predict(self.theta[u], self.x_test) - self.y_test).pow(2).mean())
            train = float((self.flat.predict(self.theta[u], self.x[u].reshape(-1, self.x.size(-1)))
                           - self.y[u].reshape(-1)).pow(2).mean())
        return {"train": {"mse": train}, "test": {"mse": test}}

    def state_dict(self) -> dict:
        return {"theta": self.theta}

    def load_state_dict(self, state: dict) -> None:
        self.theta = state["theta"].to(self.ctx.device)
        # the noise stream restarts from its seed: replay the draws of the finished rounds
        if self.noise is not None:
            self.noise.restart()


def _variant(name: str, correlation: str | None, doc: str):
    cls = type(name, (GossipSGD,), {"correlation": correlation, "__doc__": doc})
    return ALGORITHMS.register(name, params=GossipParams, tasks=("regression",))(cls)


DSGD = _variant("dsgd", None, "D-SGD without noise (non-private baseline).")
DPDSGD = _variant("dp_dsgd", "identity", "DP-D-SGD: independent Gaussian noise per node and step (C = I).")
AntiPGD = _variant("antipgd", "antipgd", "AntiPGD in DL: each node subtracts the previous step's noise.")
DMF = _variant("dmf", "dmf", "D-MF: the centralised optimal multi-epoch factorisation applied locally.")
MafaldaSGD = _variant("mafalda_sgd", "mafalda", "MAFALDA-SGD: local correlation optimised for the gossip workload.")
Muffliato = _variant("muffliato", "identity", "Muffliato-SGD: independent noise, K gossip steps per gradient.")
