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


R_MAX_DEFAULT = 1e-2


def effective_r_max(r_max: float, scale: str, n: int, n_t: int, feature_l1_mean: float) -> float:
    """The absolute residue threshold. ``inv_sqrt_n_nt`` (default) follows Lemma 3.1's prescription
    r_max = O(1/sqrt(n n_t)): the per-column error bound eps1 = sqrt(n) L r_max becomes L r_max / sqrt(n_t),
    so it shrinks as the training set grows, and the worst-case approximation component of Theorems
    4.2-4.4, (c gamma1 F / lam + c1 sqrt(F n_t)) eps1, stays about c1 sqrt(F) L r_max whatever n."""
    if scale == "inv_sqrt_n_nt":
        return r_max / np.sqrt(max(n, 1) * max(n_t, 1))
    if scale == "feature_l1_mean":
        return r_max * feature_l1_mean
    return r_max


@dataclass
class PropagationParams:
    L: int = field(default=2, metadata=spec(min=1, help="propagation levels (2 = 2-hop SGC)"))
    weights: list[float] | None = field(default=None, metadata=spec(
        help="w_0..w_L (sum |w| <= 1); null: [0, ..., 0, 1]"))
    r_max: float = field(default=R_MAX_DEFAULT, metadata=spec(min=0.0, help="residue threshold before scaling (0: exact push)"))
    r_max_scale: str = field(default="inv_sqrt_n_nt", metadata=spec(
        choices=["inv_sqrt_n_nt", "feature_l1_mean", "none"],
        help="inv_sqrt_n_nt: r_max / sqrt(n n_t), so the Lemma 3.1 bound sqrt(n) L r_max = L r_max / sqrt(n_t) "
             "does not grow with n; feature_l1_mean: times the mean column L1 norm (reference code, grows "
             "with n); none: absolute"))
    dtype: str = field(default="float32", metadata=spec(
        choices=["float32", "float64"], help="reserves/residues (float32 halves the state)"))
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
                cid=c.cid, edge_index=v.edge_index.numpy().astype(np.int64, copy=False),
                x_raw=v.x.float().numpy(), y=v.y.numpy().astype(np.int64),
                masks={s: getattr(v, f"{s}_mask").numpy().astype(bool) for s in SPLITS}))
        self.server = CertifiedServer(parties, self.ctx.out_dim, p.lam, p.noise_std, self.ctx.channel,
                                      self.ctx.seed, max_iter=p.max_iter, tol=p.tol)
        self.server.preprocess(p.propagation.feature_norm, dtype=np.dtype(p.propagation.dtype))
        pp = p.propagation
        l1 = self.server.feature_l1_mean() if pp.r_max_scale == "feature_l1_mean" else 0.0
        n = int(sum(party.n for party in parties))
        self.r_max = effective_r_max(pp.r_max, pp.r_max_scale, n, self.server.num_train(), l1)
        self.build_propagation(exact=p.exact)
        self.train_info: dict = {}

    @property
    def parties(self) -> list[PartyState]:
        return self.server.parties

    def build_propagation(self, exact: bool) -> float:
        """(Re)build every client's propagation state on its current graph; returns seconds."""
        self.exact = exact
        w = self.params.propagation.resolved_weights()
        dt = self.params.propagation.dtype
        self.propagation_s = sum(p.build_propagation(w, self.r_max, exact, dt) for p in self.parties)
        self.server.reset_state_caches()
        return self.propagation_s

    def propagation_info(self) -> dict:
        """What the unlearning record states about the propagation state it starts from."""
        props = [p.prop for p in self.parties]
        n = sum(p.n for p in self.parties)
        return {"r_max_effective": 0.0 if self.exact else self.r_max, "dtype": self.params.propagation.dtype,
                "epsilon1": 0.0 if self.exact else float(np.sqrt(n) * props[0].L * self.r_max),
                "propagation_s": self.propagation_s,
                "state_bytes": int(sum(q.memory_bytes() for q in props)),
                "residue_rows": int(sum(q.stored_residue_rows() for q in props))}

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

    def predict(self, client, local: bool = False, splits=SPLITS, subset: int | None = None,
                batch_size: int | None = None) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """Scores of every item of ``splits`` (one global linear model: ``local`` changes nothing; the
        scores are cheap, so ``subset`` is not used and every evaluation is complete)."""
        party = self.parties[client.cid]
        out = {}
        for s in splits:
            ids = party.split_ids(s)
            out[s] = (torch.from_numpy(self.server.scores(party, ids)).float(), torch.from_numpy(party.y[ids]))
        return out

    def model_for(self, client):
        raise NotImplementedError("certified_lr predicts from its propagated features (see predict)")

    def state_dict(self) -> dict:
        s = self.server
        return {"W": None if s.W is None else torch.from_numpy(s.W.copy()),
                "b": None if s.b is None else torch.from_numpy(s.b.copy()), "noise_draws": s.noise_draws,
                # the trained model's gradient residual enters the certificate's bound (scalegun.py)
                "train_residual": None if s.train_residual is None else torch.from_numpy(s.train_residual.copy()),
                "train_info": dict(self.train_info),
                # what each client last received (its gradients for unlearning are taken there)
                "last_w": [None if p.last_w is None else torch.from_numpy(p.last_w.copy()) for p in self.parties]}

    def load_state_dict(self, state: dict) -> None:
        s = self.server
        s.W = None if state["W"] is None else state["W"].numpy().copy()
        s.b = None if state["b"] is None else state["b"].numpy().copy()
        s.noise_draws = int(state["noise_draws"])
        s.train_residual = None if state["train_residual"] is None else state["train_residual"].numpy().copy()
        self.train_info = dict(state["train_info"])
        for p, w in zip(self.parties, state["last_w"]):
            p.last_w = None if w is None else w.numpy().copy()
