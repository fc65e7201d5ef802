"""Decentralised SGD with (optionally correlated) local noise over a gossip graph (Bellet et al.
2025, Algorithm 1 MF-D-SGD): each round every node takes one clipped gradient step on its next
batch, sends its half-step model θ_{t+½} to its neighbours (channel kind ``model``), and averages
what it receives with the gossip matrix W. ``gossip_steps`` K > 1 repeats the averaging
(Muffliato-SGD), each repetition sending the averaged models (kind ``model_averaged``).

Variants (one name each): dsgd (no noise), dp_dsgd (independent noise, C = I), antipgd
(C_local = tril(1)), dmf (centralised multi-epoch MF applied locally), mafalda_sgd (C_local
optimised for the gossip workload), muffliato (independent noise, K gossip steps), mf_dsgd (the
correlation named by privacy.correlation).

Participation is (k, b) cyclic: a node's training rows are split into b equal batches used in turn,
so T = rounds = k·b and each record enters k steps. The noise is privacy=mf_gdp's
(fgx/privacy/mf_gdp.py): it is added to the messages in the channel and accounted there; every
variant but dsgd needs it, dsgd refuses it."""
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


class GossipSGD(Algorithm):
    gossip = True                           # privacy=mf_gdp accounts these algorithms
    messages = {"model": Message("peer", release=True),
                "model_averaged": Message("peer", release=True)}
    correlation: str | None = "identity"    # None: no noise; "privacy": privacy.correlation

    @classmethod
    def check_config(cls, params, validated) -> None:
        name, privacy = validated.names["algorithm"], validated.names["privacy"]
        if validated.names["partitioner"] != "topology":
            raise ConfigError("partitioner", validated.names["partitioner"],
                              "topology (decentralised algorithms need the communication graph)")
        if cls.correlation is not None and privacy != "mf_gdp":
            raise ConfigError("privacy", privacy, f"mf_gdp (algorithm={name} is defined by its noise, which "
                              f"privacy=mf_gdp adds and accounts; the noise-free baseline is algorithm=dsgd)")
        if cls.correlation is None and privacy != "none":
            raise ConfigError("privacy", privacy, "none (algorithm=dsgd is the non-private baseline; "
                              "its private variants are dp_dsgd, mafalda_sgd, ...)")
        if validated.top.rounds != params.k * params.b:
            raise ConfigError("rounds", validated.top.rounds, f"algorithm.k * algorithm.b = {params.k * params.b}")

    def setup(self) -> None:
        from fgx.decentral.runtime import FlatModel
        from fgx.decentral.topology import build_graph, gossip_matrix

        p, ctx = self.params, self.ctx
        self.graph = build_graph(ctx.config.params["partitioner"])   # topology's params (check_config)
        w = gossip_matrix(self.graph, p.gossip)
        dev = ctx.device                 # all n node models, data and W live on one device
        self.w = torch.tensor(w, dtype=torch.float32, device=dev)
        self.n = len(w)
        # receivers of node u's messages: every v that averages them (W[v, u] > 0)
        self.receivers = [[int(v) for v in np.nonzero(w[:, u])[0] if v != u] for u in range(self.n)]
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
        self.test_rows = test.nonzero().view(-1).cpu()          # their ids: the rows a table's test resamples
        if self.correlation is not None:
            from fgx.privacy.mf_gdp import GossipRelease

            # one record changes a node's batch-mean of clipped gradients by at most clip / batch
            ctx.privacy.bind_gossip(GossipRelease(
                graph=self.graph, w=w, k=p.k, b=p.b, gossip_steps=p.gossip_steps, dim=d, lr=p.lr,
                gradient_sensitivity=p.clip / self.batch), type(self).__name__, self.correlation)
        ctx.log.info("%s: %d nodes, batch %d, T = %d", type(self).__name__, self.n, self.batch, p.k * p.b)

    def _send(self, kind: str, models: torch.Tensor, r: int) -> torch.Tensor:
        """Every node sends its row of ``models`` to its receivers through the channel (privacy=mf_gdp
        noises ``model``); returns what was sent, which is also what the sender keeps."""
        out = torch.empty_like(models)
        for u in range(self.n):
            out[u] = self.ctx.channel.broadcast(kind, models[u], self.receivers[u], round=r, src=u)
        return out

    def round(self, r: int) -> dict[str, float]:
        from fgx.decentral.runtime import clip_and_average

        p, t = self.params, r - 1
        j = t % p.b
        x, y = self.x[:, j], self.y[:, j]
        with torch.no_grad():
            loss = float((torch.vmap(self.flat.predict)(self.theta, x) - y).pow(2).mean())
        g = clip_and_average(self.flat.per_sample_grads(self.theta, x, y).detach(), p.clip)
        sent = self._send("model", self.theta - p.lr * g, r)
        mixed = self.w @ sent
        for _ in range(p.gossip_steps - 1):
            mixed = self.w @ self._send("model_averaged", mixed, r)
        self.theta = mixed
        return {"loss": loss}

    def client_metrics(self, client) -> dict:
        u = client.cid
        with torch.no_grad():
            sq = (self.flat.predict(self.theta[u], self.x_test) - self.y_test).pow(2)
            train = float((self.flat.predict(self.theta[u], self.x[u].reshape(-1, self.x.size(-1)))
                           - self.y[u].reshape(-1)).pow(2).mean())
        # the per-row errors the test mse is the mean of, by test row (the rows every node is scored on):
        # what a table's ordering test resamples (fgx/resampling.py)
        return {"train": {"mse": train},
                "test": {"mse": float(sq.mean()), "_items": (self.test_rows, {"mse": sq.reshape(-1).cpu()})}}

    def state_dict(self) -> dict:
        return {"theta": self.theta}

    def load_state_dict(self, state: dict) -> None:
        self.theta = state["theta"].to(self.ctx.device)


def _variant(name: str, correlation: str | None, doc: str):
    cls = type(name, (GossipSGD,), {"correlation": correlation, "__doc__": doc})
    return ALGORITHMS.register(name, params=GossipParams, tasks=("regression",))(cls)


DSGD = _variant("dsgd", None, "D-SGD without noise (non-private baseline).")
DPDSGD = _variant("dp_dsgd", "identity", "DP-D-SGD: independent Gaussian noise per node and step (C = I).")
AntiPGD = _variant("antipgd", "antipgd", "AntiPGD in DL: each node subtracts the previous step's noise.")
DMF = _variant("dmf", "dmf", "D-MF: the centralised optimal multi-epoch factorisation applied locally.")
MafaldaSGD = _variant("mafalda_sgd", "mafalda", "MAFALDA-SGD: local correlation optimised for the gossip workload.")
Muffliato = _variant("muffliato", "identity", "Muffliato-SGD: independent noise, K gossip steps per gradient.")
MFDSGD = _variant("mf_dsgd", "privacy", "MF-D-SGD (Algorithm 1) with the correlation named by privacy.correlation.")
