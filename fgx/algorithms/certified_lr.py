"""certified_lr: the certified model of ScaleGUN/CGU, trained inside fgx's trainer loop.

Each client propagates its own subgraph (generalised PageRank, reserves/residues kept for lazy
unlearning); the server trains one-vs-rest L2-regularised logistic regression with objective
perturbation on the propagated features by federated full-batch L-BFGS (every gradient is a sum of
client gradients sent through the channel). Round 1 trains to the optimum; later rounds only
evaluate. ``unlearning=scalegun|cgu|retrain`` then processes deletion requests on this state."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from fgx.algorithms.base import Algorithm
from fgx.config import ConfigError, spec
from fgx.registry import ALGORITHMS
from fgx.tasks import SPLITS, local_view
from fgx.unlearning.certified import MESSAGES, CertifiedServer, PartyState


@dataclass
class PropagationParams:
    L: int = field(default=2, metadata=spec(min=1, help="propagation levels (2 = 2-hop SGC)"))
    weights: list[float] | None = field(default=None, metadata=spec(
        help="w_0..w_L (sum |w| <= 1); null: [0, ..., 0, 1]"))
    r_max: float = field(default=1e-7, metadata=spec(min=0.0, help="residue threshold (0: exact push)"))
    r_max_scale: str = field(default="feature_l1_mean", metadata=spec(
        choices=["feature_l1_mean", "none"], help="multiply r_max by the mean column L1 norm (reference code)"))
    feature_norm: str = field(default="row_max", metadata=spec(
        choices=["row_max", "none"], help="standardise columns then divide by the largest row norm"))

    def resolved_weights(self) -> list[float]:
        return list(self.weights) if self.weights is not None else [0.0] * self.L + [1.0]


@dataclass
class CertifiedLRParams:
    lam: float = field(default=1e-2, metadata=spec(gt=0.0, help="L2 strength (times n_t)"))
    noise_std: float = field(default=0.1, metadata=spec(min=0.0, help="std alpha of the objective perturbation b"))
    propagation: PropagationParams = field(default_factory=PropagationParams)
    exact: bool = field(default=False, metadata=spec(help="exact propagation, re-run from scratch on every change"))
    max_iter: int = field(default=500, metadata=spec(min=1, help="L-BFGS iterations"))
    tol: float = field(default=1e-10, metadata=spec(gt=0.0, help="train until ||grad L_b|| <= tol * n_t"))

    def validate(self, prefix: str) -> None:
        w = self.propagation.resolved_weights()
        if len(w) != self.propagation.L + 1:
            raise ConfigError(f"{prefix}.propagation.weights", self.propagation.weights,
                              f"{self.propagation.L + 1} weights (w_0..w_L for L={self.propagation.L})")
        if sum(abs(x) for x in w) > 1.0 + 1e-12:
            raise ConfigError(f"{prefix}.propagation.weights", self.propagation.weights, "sum of |w| <= 1")


@ALGORITHMS.register("certified_lr", params=CertifiedLRParams, tasks=("node",))
class CertifiedLR(Algorithm):
    messages = MESSAGES

    def setup(self) -> None:
        p = self.params
        self.views = self.make_views(include_cross=False)
        parties = []
        for c in self.ctx.clients:
            v = local_view(c, "node", include_cross=False)
            parties.append(PartyState(
                cid=c.cid, edge_index=v.edge_index.numpy().astype(np.int64),
                x_raw=v.x.double().numpy(), y=v.y.numpy().astype(np.int64),
                masks={s: getattr(v, f"{s}_mask").numpy().astype(bool) for s in SPLITS}))
        self.server = CertifiedServer(parties, self.ctx.out_dim, p.lam, p.noise_std, self.ctx.channel,
                                      self.ctx.seed, max_iter=p.max_iter, tol=p.tol)
        self.server.preprocess(p.propagation.feature_norm)
        scale = self.server.feature_l1_mean() if p.propagation.r_max_scale == "feature_l1_mean" else 1.0
        self.r_max = p.propagation.r_max * scale
        self.build_propagation(exact=p.exact)
        self.train_info: dict = {}

    @property
    def parties(self) -> list[PartyState]:
        return self.server.parties

    def build_propagation(self, exact: bool) -> float:
        """(Re)build every client's propagation state on its current graph; returns seconds."""
        self.exact = exact
        w = self.params.propagation.resolved_weights()
        self.propagation_s = sum(p.build_propagation(w, self.r_max, exact) for p in self.parties)
        return self.propagation_s

    def train(self, fresh_noise: bool = True, warm_start: bool = True) -> float:
        t0 = time.perf_counter()
        self.train_info = self.server.train(fresh_noise, warm_start)
        return time.perf_counter() - t0

    def round(self, r: int) -> dict[str, float]:
        self.server.round = r
        if self.server.W is None:
            self.train_info["train_s"] = self.train()
            self.ctx.log.info("certified_lr: propagation %.2fs, training %.2fs (L-BFGS %d iterations, "
                              "||grad L_b|| %.2e)", self.propagation_s, self.train_info["train_s"],
                              self.train_info["lbfgs_iterations"], self.train_info["train_grad_norm"])
        return {"train_grad_norm": self.train_info.get("train_grad_norm", float("nan"))}

    def predict(self, client) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        party = self.parties[client.cid]
        scores = torch.from_numpy(self.server.scores(party)).float()
        y = torch.from_numpy(party.y)
        return {s: (scores[torch.from_numpy(party.masks[s])], y[torch.from_numpy(party.masks[s])])
                for s in SPLITS}

    def model_for(self, client):
        raise NotImplementedError("certified_lr predicts from its propagated features (see predict)")

    def state_dict(self) -> dict:
        s = self.server
        return {"W": None if s.W is None else torch.from_numpy(s.W.copy()),
                "b": None if s.b is None else torch.from_numpy(s.b.copy()), "noise_draws": s.noise_draws}

    def load_state_dict(self, state: dict) -> None:
        s = self.server
        s.W = None if state["W"] is None else state["W"].numpy().copy()
        s.b = None if state["b"] is None else state["b"].numpy().copy()
        s.noise_draws = int(state["noise_draws"])
