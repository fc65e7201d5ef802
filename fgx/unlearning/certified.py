"""The certified linear model over clients that each hold a disjoint subgraph and its propagation state.

Clients (``PartyState``) keep their graph, features, labels and propagation state; the server
(``CertifiedServer``) holds the weights W (F x C, one-vs-rest) and the noise b and only ever sees sums
of per-client quantities (gradients, Hessians or Hessian-vector products, Gram products, residue sums),
each passing through the channel with a declared kind. With one client this is centralised ScaleGUN.

Training reaches the optimum of L_b(W) = sum_k loss_k(W) + (lam n_t / 2)||W||^2 + <b, W> by full-batch
L-BFGS on aggregated gradients, polished by Newton-CG steps, because the certificate (Guo et al.,
Theorem 2.1) assumes the exact optimum; the remaining gradient norm is reported and added to the
approximation term. A deletion request is a Newton step w+ = w + H^-1 Delta with
Delta = grad L(w, D) - grad L(w, D') (only the requesting clients' parts are non-zero)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg
import scipy.optimize
import torch

from fgx.federation.channel import Message
from fgx.unlearning.logreg import LocalData, batched_cg, signed_labels
from fgx.unlearning.propagation import GPRPropagator, exact_propagation, symmetric_adjacency

GAMMA2 = 0.25      # Lipschitz constant of l'' for the logistic loss (Assumption 4.1)
C1 = 1.0           # bound on |l'| for the logistic loss

MESSAGES = {
    "feature_stats": Message("up"),
    "feature_scale": Message("down"),
    "weights": Message("down"),
    "loss_grad": Message("up"),
    "newton_stats": Message("up"),
    "hvp_vector": Message("down"),
    "hvp": Message("up"),
    "gram_matvec": Message("up"),
    "newton_direction": Message("down"),
    "prediction_change": Message("up"),
    "posteriors_auc": Message("up"),
}


def certificate_budget(noise_std: float, epsilon: float, delta: float) -> float:
    """Largest gradient-residual norm Theorem 2.1 tolerates: alpha eps / sqrt(2 log(1.5/delta))."""
    return noise_std * epsilon / np.sqrt(2.0 * np.log(1.5 / delta))


class ExactPropagator:
    """Same interface as GPRPropagator, but every change re-propagates exactly from scratch (what
    CGU and retraining pay); keeps no residues."""

    def __init__(self, adj, x, weights):
        self.adj = adj.tocsr().astype(np.float64)
        self.adj.sort_indices()
        self.x = np.array(x, dtype=np.float64, copy=True)
        self.weights = np.asarray(weights, dtype=np.float64)
        self.L = self.weights.size - 1
        self.n, self.F = self.x.shape
        self.r_max = 0.0
        self.deg = np.asarray(self.adj.sum(1)).ravel()
        self._z = exact_propagation(self.adj, self.x, self.weights)
        self.deferred = False    # True: changes only mark Z stale; it is recomputed when next read
        self._stale = False

    @property
    def Z(self) -> np.ndarray:
        if self._stale:
            self._z = exact_propagation(self.current_adjacency(), self.x, self.weights)
            self._stale = False
        return self._z

    _positions = GPRPropagator._positions
    edges = GPRPropagator.edges
    incident_edges = GPRPropagator.incident_edges
    current_adjacency = GPRPropagator.current_adjacency

    def embedding(self) -> np.ndarray:
        return self.Z

    def _recompute(self) -> np.ndarray:
        self._stale = True
        if not self.deferred:
            self.Z
        return np.arange(self.n)

    def remove_edges(self, edges) -> np.ndarray:
        e = np.asarray(edges, dtype=np.int64).reshape(2, -1)
        u, v = e
        for pos in (self._positions(u, v), self._positions(v, u)):
            if np.any(pos < 0):
                raise ValueError("an edge to remove is not in the graph")
            self.adj.data[pos] = 0.0
        np.subtract.at(self.deg, np.concatenate([u, v]), 1.0)
        return self._recompute()

    def remove_node_features(self, nodes) -> np.ndarray:
        self.x[np.asarray(nodes, dtype=np.int64)] = 0.0
        return self._recompute()

    def remove_nodes(self, nodes) -> np.ndarray:
        nodes = np.unique(np.asarray(nodes, dtype=np.int64))
        e = self.incident_edges(nodes)
        if e.shape[1]:
            u, v = e
            self.adj.data[self._positions(u, v)] = 0.0
            self.adj.data[self._positions(v, u)] = 0.0
            np.subtract.at(self.deg, np.concatenate([u, v]), 1.0)
        self.x[nodes] = 0.0
        return self._recompute()

    def exact_embedding(self) -> np.ndarray:
        return self.Z

    def residue_colsum(self, absolute: bool = False) -> np.ndarray:
        return np.zeros(self.F)

    def error_bound(self) -> float:
        return 0.0


@dataclass
class PartyState:
    """One client's private data and propagation state (node ids are the client's local ids)."""
    cid: int
    edge_index: np.ndarray           # local undirected edges (2, m), as given
    x_raw: np.ndarray
    y: np.ndarray
    masks: dict[str, np.ndarray]     # train/val/test boolean masks over local nodes
    x: np.ndarray | None = None      # preprocessed features
    prop: object = None
    removed_train: np.ndarray | None = None
    last_w: np.ndarray | None = None   # the weights last broadcast to this client
    extra_edges: np.ndarray = field(default_factory=lambda: np.zeros((2, 0), dtype=np.int64))

    @property
    def n(self) -> int:
        return int(self.x_raw.shape[0])

    def train_ids(self) -> np.ndarray:
        keep = self.masks["train"].copy()
        if self.removed_train is not None:
            keep &= ~self.removed_train
        return np.flatnonzero(keep)

    def local_data(self, num_classes: int) -> LocalData:
        """The training rows of the current embedding (cached until ``invalidate``)."""
        cached = self.__dict__.get("_local")
        if cached is None:
            ids = self.train_ids()
            cached = self.__dict__["_local"] = LocalData(self.prop.Z[ids], signed_labels(self.y[ids], num_classes))
        return cached

    def invalidate(self) -> None:
        self.__dict__.pop("_local", None)

    def build_propagation(self, weights, r_max: float, exact: bool) -> float:
        t0 = time.perf_counter()
        ei = np.hstack([self.edge_index, self.extra_edges])
        adj = symmetric_adjacency(ei, self.n)
        self.prop = ExactPropagator(adj, self.x, weights) if exact else GPRPropagator(adj, self.x, weights, r_max)
        self.invalidate()
        return time.perf_counter() - t0


def _t(a) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64))


class CertifiedServer:
    """Federated (or, with one party, centralised) certified one-vs-rest logistic regression."""

    def __init__(self, parties: list[PartyState], num_classes: int, lam: float, noise_std: float,
                 channel, seed: int, max_iter: int = 500, tol: float = 1e-10):
        self.parties = parties
        self.C = num_classes
        self.lam = lam
        self.noise_std = noise_std
        self.channel = channel
        self.seed = seed
        self.max_iter = max_iter
        self.tol = tol
        self.round = 0
        self.exchanges = 0
        self.noise_draws = 0
        self.W = None
        self.b = None
        self.train_residual = None

    # -- the channel -------------------------------------------------------------------------------
    def broadcast(self, kind: str, payload: np.ndarray, parties=None) -> None:
        parties = self.parties if parties is None else parties
        self.channel.broadcast(kind, _t(payload), [p.cid for p in parties], self.round)
        if kind == "weights":
            for p in parties:
                p.last_w = payload.copy()

    def gather(self, kind: str, fn, parties=None, reduce: str = "sum"):
        """Each party computes ``fn(party)`` (a dict of arrays) and sends it; the server combines."""
        parties = self.parties if parties is None else parties
        self.exchanges += 1
        out = None
        for p in parties:
            msg = {k: _t(v) for k, v in fn(p).items()}
            msg = self.channel.send(kind, msg, src=p.cid, dst="server", round=self.round)
            vals = {k: v.numpy() for k, v in msg.items()}
            if out is None:
                out = {k: v.copy() for k, v in vals.items()}
            else:
                for k, v in vals.items():
                    out[k] = np.maximum(out[k], v) if reduce == "max" else out[k] + v
        return out

    # -- preprocessing (StandardScaler + max row norm, from aggregated statistics) -------------------
    def preprocess(self, feature_norm: str) -> None:
        s = self.gather("feature_stats", lambda p: {"n": np.array([p.n]), "sum": p.x_raw.sum(0),
                                                    "sq": (p.x_raw.astype(np.float64) ** 2).sum(0)})
        n = s["n"][0]
        mean = s["sum"] / n
        std = np.sqrt(np.maximum(s["sq"] / n - mean ** 2, 0.0))
        std[std == 0] = 1.0
        self.broadcast("feature_scale", np.concatenate([mean, std]))
        for p in self.parties:
            p.x = np.nan_to_num((p.x_raw - mean) / std)
        if feature_norm == "row_max":
            m = self.gather("feature_stats", lambda p: {"max_row_norm": np.array([np.linalg.norm(p.x, axis=1).max()
                                                                                   if p.n else 0.0])}, reduce="max")
            scale = max(float(m["max_row_norm"][0]), 1e-300)
            self.broadcast("feature_scale", np.array([scale]))
            for p in self.parties:
                p.x = p.x / scale

    def feature_l1_mean(self) -> float:
        s = self.gather("feature_stats", lambda p: {"l1": np.abs(p.x).sum(0)})
        return float(s["l1"].mean())

    # -- objective ------------------------------------------------------------------------------------
    def num_train(self) -> int:
        return int(sum(p.train_ids().size for p in self.parties))

    def objective(self, w: np.ndarray, n_t: int) -> tuple[float, np.ndarray]:
        self.broadcast("weights", w)
        agg = self.gather("loss_grad", self._party_loss_grad)
        loss = agg["loss"][0] + 0.5 * self.lam * n_t * (w * w).sum() + (self.b * w).sum()
        grad = agg["grad"] + self.lam * n_t * w + self.b
        return loss, grad

    def _party_loss_grad(self, p: PartyState) -> dict:
        loss, grad = p.local_data(self.C).loss_grad(p.last_w)
        return {"loss": np.array([loss]), "grad": grad}

    def hvp(self, w: np.ndarray, v: np.ndarray, n_t: int) -> np.ndarray:
        self.broadcast("hvp_vector", v)
        agg = self.gather("hvp", lambda p: {"hv": p.local_data(self.C).hvp(w, v)})
        return agg["hv"] + self.lam * n_t * v

    def draw_noise(self, F: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, 7919, self.noise_draws])
        self.noise_draws += 1
        return rng.normal(0.0, self.noise_std, (F, self.C)) if self.noise_std > 0 else np.zeros((F, self.C))

    def train(self, fresh_noise: bool = True, warm_start: bool = True) -> dict:
        """Full-batch L-BFGS then Newton-CG polish to ||grad L_b|| <= tol * n_t per class."""
        F = self.parties[0].x.shape[1]
        if fresh_noise or self.b is None:
            self.b = self.draw_noise(F)
        n_t = self.num_train()
        w0 = np.zeros((F, self.C)) if self.W is None or not warm_start else self.W

        def fg(flat):
            loss, grad = self.objective(flat.reshape(F, self.C), n_t)
            return loss, grad.ravel()

        res = scipy.optimize.minimize(fg, w0.ravel(), jac=True, method="L-BFGS-B",
                                      options={"maxiter": self.max_iter, "gtol": 1e-12, "ftol": 1e-15,
                                               "maxcor": 20})
        w = res.x.reshape(F, self.C)
        newton = 0
        for newton in range(1, 11):
            _, g = self.objective(w, n_t)
            if np.linalg.norm(g, axis=0).max() <= self.tol * n_t:
                break
            step, _ = batched_cg(lambda v: self.hvp(w, v, n_t), -g, tol=1e-12, max_iter=200)
            w = w + step
        _, g = self.objective(w, n_t)
        self.W = w
        self.train_residual = np.linalg.norm(g, axis=0)
        return {"lbfgs_iterations": int(res.nit), "newton_polish": newton,
                "train_grad_norm": float(self.train_residual.max())}

    # -- predictions ----------------------------------------------------------------------------------
    def scores(self, party: PartyState) -> np.ndarray:
        return party.prop.Z @ self.W

    def accuracy(self, split: str = "test") -> float:
        correct = total = 0
        for p in self.parties:
            ids = np.flatnonzero(p.masks[split])
            if ids.size:
                correct += int((self.scores(p)[ids].argmax(1) == p.y[ids]).sum())
                total += ids.size
        return correct / max(total, 1)

    # -- the Newton unlearning step and its data-dependent bound -------------------------------------------
    def newton_step(self, delta: np.ndarray, solver: str, residue_norm: str, spectral_init=None) -> dict:
        """Solve H v = Delta at the current W on the new data; return v and the norms of Theorem 4.5."""
        n_t = self.num_train()
        w = self.W
        self.broadcast("weights", w)
        absolute = residue_norm == "abs"
        if solver == "hessian":
            agg = self.gather("newton_stats", lambda p: {
                "hessian": p.local_data(self.C).hessians(p.last_w), "gram": p.local_data(self.C).gram(),
                "residue_sum": p.prop.residue_colsum(absolute)})
            v = np.empty_like(delta)
            for c in range(self.C):
                h = agg["hessian"][c] + self.lam * n_t * np.eye(delta.shape[0])
                v[:, c] = scipy.linalg.cho_solve(scipy.linalg.cho_factor(h), delta[:, c])
            z_norm = float(np.sqrt(max(np.linalg.eigvalsh(agg["gram"])[-1], 0.0)))
            iters, residue = 0, agg["residue_sum"]
        else:
            agg = self.gather("newton_stats", lambda p: {"residue_sum": p.prop.residue_colsum(absolute)})
            residue = agg["residue_sum"]
            v, iters = batched_cg(lambda d: self.hvp(w, d, n_t), delta, tol=1e-10, max_iter=500)
            z_norm, spectral_init = self.spectral_norm(spectral_init)
        self.broadcast("newton_direction", v)
        pc = self.gather("prediction_change", lambda p: {"sq": p.local_data(self.C).prediction_change_sq(v)})
        v_norm = np.linalg.norm(v, axis=0)
        zv_norm = np.sqrt(pc["sq"])
        return {"v": v, "z_norm": z_norm, "v_norm": v_norm, "zv_norm": zv_norm,
                "unlearning_term": GAMMA2 * z_norm * v_norm * zv_norm,
                "residue_norm": float(np.linalg.norm(residue)), "cg_iterations": iters,
                "spectral_vector": spectral_init}

    def spectral_norm(self, init=None, max_iter: int = 100, tol: float = 1e-6):
        """||Z_train|| by power iteration on the aggregated Gram product (warm-started)."""
        F = self.parties[0].x.shape[1]
        v = np.ones(F) if init is None else init.copy()
        v /= np.linalg.norm(v)
        lam_old = 0.0
        for _ in range(max_iter):
            self.broadcast("hvp_vector", v)
            g = self.gather("gram_matvec", lambda p: {"gv": p.local_data(self.C).gram_matvec(v)})["gv"]
            lam = float(v @ g)
            nrm = np.linalg.norm(g)
            if nrm == 0:
                return 0.0, v
            v = g / nrm
            if abs(lam - lam_old) <= tol * max(lam, 1e-300):
                break
            lam_old = lam
        return float(np.sqrt(max(nrm, 0.0))), v
