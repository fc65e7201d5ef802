"""The certified linear model over clients that each hold a disjoint subgraph and its propagation state.

Clients (``PartyState``) keep their graph, features, labels, propagation state and their training rows
of the embedding; the server (``CertifiedServer``) holds the weights W (F x C, one-vs-rest) and the
noise b and only ever sees sums of per-client quantities (gradients, gradient changes, Hessians or
Hessian-vector products, Gram matrices or products, residue sums), each passing through the channel
with a declared kind. With one client this is centralised ScaleGUN.

Training reaches the optimum of L_b(W) = sum_k loss_k(W) + (lam n_t / 2)||W||^2 + <b, W> by full-batch
L-BFGS on aggregated gradients, polished by Newton-CG steps, because the certificate (Guo et al.,
Theorem 2.1) assumes the exact optimum; the remaining gradient norm is reported and added to the
approximation term. A deletion request is a Newton step w+ = w + H^-1 Delta with
Delta = grad L(w, D) - grad L(w, D'); a client computes its part of Delta from the training rows the
request changed (or removed) only, so a request costs what it touches plus the model update."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg
import scipy.optimize
import torch

from fgx.federation.channel import Message
from fgx.unlearning.factored import FactoredHessian
from fgx.unlearning.logreg import LocalData, batched_cg, signed_labels
from fgx.unlearning.propagation import ExactPropagator, GPRPropagator, exact_propagation, symmetric_adjacency

GAMMA1 = 0.25      # Lipschitz constant of l' for the logistic loss (sup l'' = 1/4)
GAMMA2 = 0.25      # Lipschitz constant of l'' for the logistic loss (Assumption 4.1)
C1 = 1.0           # bound on |l'| for the logistic loss
GRAM_MAX_F = 512   # spectral_norm=auto: the server keeps the aggregated F x F Gram matrix up to this F

MESSAGES = {
    "feature_stats": Message("up"),
    "feature_scale": Message("down"),
    "weights": Message("down"),
    "loss_grad": Message("up"),
    "gradient_change": Message("up"),
    "newton_stats": Message("up"),
    "residue_sums": Message("up"),
    "gram": Message("up"),
    "gram_update": Message("up"),
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


@dataclass
class RowChange:
    """What one request did to a client's training rows: rows whose embedding changed (old and new
    values) and rows that left the training set (their last values)."""
    old: np.ndarray                  # changed rows before (k x F)
    new: np.ndarray                  # changed rows after
    ysign: np.ndarray                # their one-vs-rest labels (k x C)
    removed: np.ndarray              # rows that left the training set (r x F)
    removed_ysign: np.ndarray

    def old_data(self) -> LocalData:
        return LocalData(np.vstack([self.old, self.removed]), np.vstack([self.ysign, self.removed_ysign]))

    def new_data(self) -> LocalData:
        return LocalData(self.new, self.ysign)


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
    change: RowChange | None = None    # the last request's effect on the training rows
    anchor: object = None              # solver=factored: anchor values of the rows changed since (AnchorRows)
    row_norm_max: float = 0.0          # solver=factored: an upper bound on the training rows' norms

    @property
    def n(self) -> int:
        return int(self.x_raw.shape[0])

    def train_ids(self) -> np.ndarray:
        local = self.__dict__.get("_local")
        if local is not None:
            return self.__dict__["_ids"]
        keep = self.masks["train"].copy()
        if self.removed_train is not None:
            keep &= ~self.removed_train
        return np.flatnonzero(keep)

    def num_train(self) -> int:
        return int(self.train_ids().size)

    def split_ids(self, split: str) -> np.ndarray:
        cache = self.__dict__.setdefault("_split_ids", {})
        if split not in cache:
            cache[split] = np.flatnonzero(self.masks[split])
        return cache[split]

    def local_data(self, num_classes: int) -> LocalData:
        """The training rows of the current embedding, kept in step with the propagation state."""
        cached = self.__dict__.get("_local")
        if cached is None:
            ids = self.train_ids()
            cached = self.__dict__["_local"] = LocalData(self.prop.rows(ids), signed_labels(self.y[ids], num_classes))
            self.__dict__["_ids"] = ids
            self.__dict__.pop("_gram", None)
        return cached

    def gram(self, num_classes: int) -> np.ndarray:
        """Z_train^T Z_train (F x F), updated by each request from the rows it changed."""
        g = self.__dict__.get("_gram")
        if g is None:
            z = self.local_data(num_classes).z
            g = self.__dict__["_gram"] = z.T @ z
            # |computed - exact| <= gamma_(n_t) |Z|^T |Z| entrywise, whose Frobenius norm is <= ||Z||_F^2
            self.__dict__["_gram_error"] = _gamma64(z.shape[0] + 2) * float((z * z).sum())
        return g

    def gram_error(self) -> float:
        """A bound on ||G_kept - Z^T Z||_F for the kept Gram G (its rounding, accumulated over its updates)."""
        return float(self.__dict__.get("_gram_error", 0.0))

    def invalidate(self) -> None:
        for k in ("_local", "_ids", "_gram", "_gram_error"):
            self.__dict__.pop(k, None)

    def current_features(self) -> np.ndarray:
        """The preprocessed features with the rows of removed nodes (feature and node requests) zeroed."""
        if self.removed_train is None or not self.removed_train.any():
            return self.x
        x = self.x.copy()
        x[self.removed_train] = 0
        return x

    def build_propagation(self, weights, r_max: float, exact: bool, dtype="float32") -> float:
        t0 = time.perf_counter()
        self.prop = None            # free the previous state before building the next
        self.invalidate()
        adj = self.__dict__.get("_adj")
        if adj is None or self.__dict__.get("_adj_extra") != self.extra_edges.shape[1]:
            # the graph as given (plus injected edges); kept, so rebuilding a state does not rebuild it
            adj = symmetric_adjacency(np.hstack([self.edge_index, self.extra_edges]), self.n)
            self.__dict__["_adj"], self.__dict__["_adj_extra"] = adj, self.extra_edges.shape[1]
        self.prop = (ExactPropagator(adj, self.x, weights, dtype) if exact
                     else GPRPropagator(adj, self.x, weights, r_max, dtype))
        self.invalidate()
        return time.perf_counter() - t0

    def _remove(self, kind: str, items) -> tuple[np.ndarray, np.ndarray]:
        """The graph/feature change; returns the rows whose embedding may have changed and the
        removed nodes (feature and node requests: their labels leave the training set)."""
        if kind == "edge":
            return self.prop.remove_edges(items), np.empty(0, dtype=np.int64)
        nodes = np.unique(np.asarray(items, dtype=np.int64))
        if self.removed_train is None:
            self.removed_train = np.zeros(self.n, dtype=bool)
        self.removed_train[nodes] = True
        changed = self.prop.remove_node_features(nodes) if kind == "feature" else self.prop.remove_nodes(nodes)
        return changed, nodes

    def apply(self, kind: str, items, num_classes: int, sync: bool = True) -> RowChange | None:
        """Remove ``items`` (edges (2, k), or node ids) from the graph, update the training rows they
        changed, and record the change (the client's part of Delta is computed from it).
        ``sync=False``: only change the graph (the training rows are rebuilt when next read)."""
        if not sync:
            self.invalidate()
            self._remove(kind, items)
            self.change = None
            return None
        local = self.local_data(num_classes)
        ids = self.__dict__["_ids"]
        gram = self.__dict__.get("_gram")
        changed, nodes = self._remove(kind, items)

        def positions(rows):
            if ids.size == 0:
                return rows[:0]
            pos = np.searchsorted(ids, rows)
            ok = (pos < ids.size) & (ids[np.minimum(pos, ids.size - 1)] == rows)
            return pos[ok]

        gone = positions(nodes)
        pos = positions(changed)
        if gone.size:
            pos = np.setdiff1d(pos, gone, assume_unique=True)
        old = local.z[pos].copy()
        new = self.prop.rows(ids[pos])
        moved = np.any(new != old, axis=1)      # exact baselines report every row; keep those that moved
        pos, old, new = pos[moved], old[moved], new[moved]
        local.z[pos] = new
        change = RowChange(old, new, local.ysign[pos].copy(), local.z[gone].copy(), local.ysign[gone].copy())
        if self.anchor is not None:          # solver=factored: the anchor values of rows changed since
            self.anchor.remember(ids[pos], old)
            self.anchor.remember(ids[gone], change.removed)
            if new.size:
                self.row_norm_max = max(self.row_norm_max, float(np.linalg.norm(new, axis=1).max()))
        if gram is not None:
            gram += new.T @ new - old.T @ old - change.removed.T @ change.removed
            moved = float((new * new).sum() + (old * old).sum() + (change.removed * change.removed).sum())
            self.__dict__["_gram_error"] = (self.gram_error() + _gamma64(len(new) + len(change.removed) + 5) * moved
                                            + _gamma64(1) * float(np.linalg.norm(gram)))
        if gone.size:
            keep = np.ones(ids.size, dtype=bool)
            keep[gone] = False
            self.__dict__["_local"] = LocalData(local.z[keep], local.ysign[keep])
            self.__dict__["_ids"] = ids[keep]
        self.change = change
        return change


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
        self.gram = None            # aggregated Z_train^T Z_train (spectral_norm=gram)
        self.residue_sums: dict[str, dict] = {}    # mode -> cid -> that client's residue sums
        self.z_bound = None          # spectral_norm=incremental: an upper bound on lambda_max(Z_train^T Z_train) ...
        self.z_exact = None          # ... and the exact value (plus margin) at the last refresh
        self.factored = FactoredHessian(self)      # solver=factored: the anchor Hessian's factors

    def reset_state_caches(self) -> None:
        """After the clients rebuilt their propagation state: forget what was aggregated from it."""
        self.gram, self.residue_sums, self.z_bound, self.z_exact = None, {}, None, None
        self.factored.w0 = None         # rebuilt from the new rows at the next factored solve

    def repropagate(self) -> float:
        """Exact re-propagation at every client on its current graph and features: the residues are
        reset to zero (only the state's rounding is left), so the approximation term restarts near zero.
        What a certified retraining needs before it trains. Returns seconds."""
        t0 = time.perf_counter()
        for p in self.parties:
            p.prop.repropagate(p.current_features(), threshold=0.0)
            p.invalidate()
        self.reset_state_caches()
        return time.perf_counter() - t0

    def retrain_exact(self) -> dict:
        """The certified retraining: exact re-propagation, then training from scratch (W = 0) with a
        fresh draw of b, as a model trained on D' would have."""
        prop_s = self.repropagate()
        t0 = time.perf_counter()
        self.train(fresh_noise=True, warm_start=False)
        return {"repropagation_s": prop_s, "train_s": time.perf_counter() - t0}

    def approximation_state(self, mode: str = "theorem", parties=None) -> dict:
        """What the propagation error adds to the gradient-residual bound, summed over all clients.

        ``theorem`` (default): the per-column sums s = s_res + s_round with sum_u |Z - Z_hat|(u, j) <= s_j
        (``certificate_sums``: tau-weighted |R| of the tracked residues, the state's rounding bound, and for
        exact states the float64 propagation's rounding); ``error_sums`` is s, for the bound
        c1 ||s|| + gamma1 ||Z'|| |w|^T s (docs/unlearning.md, *Theorem 1*).
        ``paper_estimate``: ||1^T R|| with signed residues and the drift of the implied signed sums (the
        paper's 2 c1 ||1^T R||; not a bound in general: the two-triangle example).
        ``parties``: the clients whose sums may have changed (the server keeps the others' last sums)."""
        parties = self.parties if parties is None else parties
        ids = {p.cid for p in parties}
        cache = self.residue_sums.setdefault(mode, {})
        fresh = [p for p in self.parties if p.cid not in cache or p.cid in ids]

        def theorem(q):
            res, rnd = q.prop.certificate_sums()
            return {"res": res, "round": rnd}

        def signed(q):
            tracked = q.prop.residue_colsum()
            return {"res": tracked, "round": q.prop.implied_residue_colsum() - tracked,
                    "error": q.prop.implied_residue_error()}

        for p in fresh:
            cache[p.cid] = self.gather("residue_sums", theorem if mode == "theorem" else signed, [p])
        total = {k: np.sum([cache[p.cid][k] for p in self.parties], axis=0) for k in cache[self.parties[0].cid]}
        if mode == "theorem":
            return {"residue_norm": float(np.linalg.norm(total["res"])),
                    "rounding_norm": float(np.linalg.norm(total["round"])),
                    "residue_sums": total["res"], "error_sums": total["res"] + total["round"]}
        return {"residue_norm": float(np.linalg.norm(total["res"])),
                "rounding_norm": float(np.linalg.norm(total["round"]) + np.linalg.norm(total["error"]))}

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
    def preprocess(self, feature_norm: str, dtype=np.float64) -> None:
        s = self.gather("feature_stats", lambda p: {"n": np.array([p.n]), "sum": p.x_raw.sum(0, dtype=np.float64),
                                                    "sq": np.einsum("ij,ij->j", p.x_raw, p.x_raw, dtype=np.float64)})
        n = s["n"][0]
        mean = s["sum"] / n
        std = np.sqrt(np.maximum(s["sq"] / n - mean ** 2, 0.0))
        std[std == 0] = 1.0
        self.broadcast("feature_scale", np.concatenate([mean, std]))
        for p in self.parties:
            p.x = np.empty(p.x_raw.shape, dtype=dtype)
            for lo in range(0, p.n, 65536):        # row chunks: no n x F float64 temporary
                p.x[lo:lo + 65536] = np.nan_to_num((p.x_raw[lo:lo + 65536] - mean) / std)
        if feature_norm == "row_max":
            m = self.gather("feature_stats", lambda p: {"max_row_norm": np.array([np.linalg.norm(p.x, axis=1).max()
                                                                                   if p.n else 0.0])}, reduce="max")
            scale = max(float(m["max_row_norm"][0]), 1e-300)
            self.broadcast("feature_scale", np.array([scale]))
            for p in self.parties:
                p.x /= p.x.dtype.type(scale)

    def feature_l1_mean(self) -> float:
        s = self.gather("feature_stats", lambda p: {"l1": np.abs(p.x).sum(0, dtype=np.float64)})
        return float(s["l1"].mean())

    # -- objective ------------------------------------------------------------------------------------
    def num_train(self) -> int:
        return int(sum(p.num_train() for p in self.parties))

    def objective(self, w: np.ndarray, n_t: int) -> tuple[float, np.ndarray]:
        self.broadcast("weights", w)
        agg = self.gather("loss_grad", self._party_loss_grad)
        loss = agg["loss"][0] + 0.5 * self.lam * n_t * (w * w).sum() + (self.b * w).sum()
        grad = agg["grad"] + self.lam * n_t * w + self.b
        return loss, grad

    def _party_loss_grad(self, p: PartyState) -> dict:
        loss, grad = p.local_data(self.C).loss_grad(p.last_w)
        return {"loss": np.array([loss]), "grad": grad}

    def hvp(self, w: np.ndarray, v: np.ndarray, n_t: int, at_old: bool = False) -> np.ndarray:
        """(H v) per class at w on the current data; ``at_old``: on the data before the last request
        (the influence-function Hessian of CEU), from each client's recorded row change."""
        self.broadcast("hvp_vector", v)

        def part(p):
            hv = p.local_data(self.C).hvp(w, v)
            if at_old and p.change is not None:
                hv = hv + p.change.old_data().hvp(w, v) - p.change.new_data().hvp(w, v)
            return {"hv": hv}

        agg = self.gather("hvp", part)
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
            step, _, _ = batched_cg(lambda v: self.hvp(w, v, n_t), -g, tol=1e-12, max_iter=200)
            w = w + step
        _, g = self.objective(w, n_t)
        self.W = w
        self.train_residual = np.linalg.norm(g, axis=0)
        return {"lbfgs_iterations": int(res.nit), "newton_polish": newton,
                "train_grad_norm": float(self.train_residual.max())}

    # -- predictions ----------------------------------------------------------------------------------
    def scores(self, party: PartyState, ids: np.ndarray | None = None, chunk: int = 65536) -> np.ndarray:
        """Class scores Z_hat W of ``ids`` (default: all nodes), computed in row chunks."""
        ids = np.arange(party.n) if ids is None else ids
        out = np.empty((ids.size, self.C))
        for lo in range(0, ids.size, chunk):
            out[lo:lo + chunk] = party.prop.rows(ids[lo:lo + chunk]) @ self.W
        return out

    def accuracy(self, split: str = "test") -> float:
        correct = total = 0
        for p in self.parties:
            ids = p.split_ids(split)
            if ids.size:
                correct += int((self.scores(p, ids).argmax(1) == p.y[ids]).sum())
                total += ids.size
        return correct / max(total, 1)

    # -- the deletion request: Delta from the changed rows, the Newton step, the certificate -------------
    def gradient_change(self, parties) -> np.ndarray:
        """sum over the requesting clients of grad(old rows) - grad(new rows) at the broadcast W."""
        agg = self.gather("gradient_change", lambda p: {
            "delta": p.change.old_data().grad(p.last_w) - p.change.new_data().grad(p.last_w)}, parties)
        return agg["delta"]

    def solve(self, delta: np.ndarray, solver: str, at_old: bool = False) -> dict:
        """v = H^-1 Delta at the current W (on the new data; ``at_old``: on the data before the request)
        and the residual ||H v - Delta|| per class, which the accountant adds to the bound."""
        n_t = self.num_train()
        if at_old:
            n_t += sum(p.change.removed.shape[0] for p in self.parties if p.change is not None)
        w = self.W
        if solver == "factored":
            build_s = self.factored.build() if self.factored.stale() else 0.0
            return {**self.factored.solve(delta), "anchor_build_s": build_s}
        if solver == "hessian":
            def part(p):
                h = p.local_data(self.C).hessians(p.last_w)
                if at_old and p.change is not None:
                    h = h + p.change.old_data().hessians(p.last_w) - p.change.new_data().hessians(p.last_w)
                return {"hessian": h}
            agg = self.gather("newton_stats", part)
            v = np.empty_like(delta)
            resid = np.empty(self.C)
            for c in range(self.C):
                h = agg["hessian"][c] + self.lam * n_t * np.eye(delta.shape[0])
                v[:, c] = scipy.linalg.cho_solve(scipy.linalg.cho_factor(h), delta[:, c])
                resid[c] = np.linalg.norm(h @ v[:, c] - delta[:, c])
            return {"v": v, "cg_iterations": 0, "solve_residual": resid}
        v, iters, _ = batched_cg(lambda d: self.hvp(w, d, n_t, at_old), delta, tol=1e-10, max_iter=500)
        resid = np.linalg.norm(self.hvp(w, v, n_t, at_old) - delta, axis=0)   # the true residual, one more product
        return {"v": v, "cg_iterations": iters, "solve_residual": resid}

    def true_gradient_norm(self, w: np.ndarray | None = None) -> np.ndarray:
        """||grad L_b(W, D')|| per class with the training rows of the exactly propagated embedding of the
        dataset's features (float64 propagation of the current features over the current graph; never
        features recovered from a rounded state) - the quantity the certificate bounds (the paper's
        Fig. 2; one exact propagation per client). ``w``: the weights to evaluate (default W)."""
        n_t = self.num_train()
        self.broadcast("weights", self.W if w is None else w)

        def part(p):
            ids = p.train_ids()
            z = exact_propagation(p.prop.adj, p.current_features(), p.prop.weights, p.prop.deg,
                                  dtype=np.float64)[ids]
            loss, g = LocalData(z, signed_labels(p.y[ids], self.C)).loss_grad(p.last_w)
            return {"loss": np.array([loss]), "grad": g}

        agg = self.gather("loss_grad", part)
        w = self.W if w is None else w
        return np.linalg.norm(agg["grad"] + self.lam * n_t * w + self.b, axis=0)

    def hessian_change_norm(self, v: np.ndarray) -> np.ndarray:
        """||(H_D' - H_D) v|| per class at the current W (the Hessian the influence step skipped);
        only the requesting clients' changed rows contribute."""
        touched = [p for p in self.parties if p.change is not None]
        n_removed = sum(p.change.removed.shape[0] for p in touched)
        agg = self.gather("hvp", lambda p: {"hv": p.change.new_data().hvp(p.last_w, v)
                                            - p.change.old_data().hvp(p.last_w, v)}, touched)
        return np.linalg.norm(agg["hv"] - self.lam * n_removed * v, axis=0)

    def certificate_terms(self, v: np.ndarray, residue_norm: str, spectral: str, touched, slack: float = 0.1) -> dict:
        """||Z'|| (an upper bound), ||Z' v|| per class and the propagation error's sums."""
        z_norm, spectral_info = self.spectral_norm(spectral, touched, slack)
        self.broadcast("newton_direction", v)
        def change_sq(p):
            g = p.__dict__.get("_gram")
            if g is None or p.num_train() <= v.shape[0]:
                return {"sq": p.local_data(self.C).prediction_change_sq(v)}
            # ||Z v_c||^2 = v_c^T G v_c from the kept Gram (O(F^2) instead of a pass over the rows), plus the
            # rounding its incremental updates accumulated (||G_kept - Z^T Z|| ||v_c||^2) and that of the product
            vv = (v * v).sum(0)
            quad = np.einsum("ic,ij,jc->c", v, g, v)
            slack = (p.gram_error() + _gamma64(2 * v.shape[0] + 2) * float(np.abs(g).sum())) * vv
            return {"sq": np.maximum(quad, 0.0) + slack}

        pc = self.gather("prediction_change", change_sq)
        # residue column sums and rounding bounds are maintained by the clients' states (O(F) to read);
        # only the clients a request touched can have new ones, the others' last sums are kept by the server
        approx = self.approximation_state(residue_norm, touched)
        return {"z_norm": z_norm, "zv_norm": np.sqrt(pc["sq"]), **approx, **spectral_info}

    def spectral_norm(self, mode: str, touched, slack: float = 0.1) -> tuple[float, dict]:
        """An upper bound on ||Z_train|| = sqrt(lambda_max(sum_k Z_k^T Z_k)), never an estimate.

        ``gram``: the server keeps the aggregated F x F Gram matrix (each request's clients send the
        change of theirs) and takes LAPACK's largest eigenvalue plus a rounding margin, every request;
        ``incremental``: that exact value at a refresh, then per request Weyl's inequality
        lambda_max(G') <= lambda_max(G) + lambda_max(G' - G), each client bounding the top eigenvalue of its
        Gram change N^T N - O^T O - R^T R (changed rows new / old, removed rows) exactly from the small
        matrix of those rows; refreshed when the bound exceeds the exact norm by ``slack``."""
        F = self.parties[0].x.shape[1]
        if mode == "auto":
            mode = "gram" if F <= GRAM_MAX_F else "incremental"
        if mode == "gram":
            if self.gram is None:
                self.gram = self.gather("gram", lambda p: {"gram": p.gram(self.C)})["gram"]
                sent = self.parties
            else:
                sent = touched
                if touched:
                    upd = self.gather("gram_update", lambda p: {"gram": p.gram(self.C) - p.__dict__["_gram_sent"]},
                                      touched)
                    self.gram = self.gram + upd["gram"]
            for p in sent:
                p.__dict__["_gram_sent"] = p.gram(self.C).copy()
            return float(np.sqrt(_top_eigenvalue_bound(self.gram, self.num_train()))), \
                {"spectral_iterations": 0, "spectral_refresh": 1}
        if mode != "incremental":
            raise ValueError(f"spectral_norm must be auto, gram or incremental, got {mode!r}")
        refresh = self.z_bound is None
        if not refresh:
            moved = [p for p in touched if p.change is not None]
            if moved:
                got = self.gather("gram_update", lambda p: {"top": np.array([_gram_change_top(p.change)])}, moved)
                self.z_bound += float(got["top"][0])
            refresh = self.z_bound > (1.0 + slack) ** 2 * self.z_exact
        if refresh:
            def fresh_gram(p):
                g = p.__dict__.get("_gram")
                return {"gram": g if g is not None else p.local_data(self.C).gram()}
            gram = self.gather("gram", fresh_gram)["gram"]
            self.z_exact = self.z_bound = _top_eigenvalue_bound(gram, self.num_train())
        return float(np.sqrt(self.z_bound)), {"spectral_iterations": 0, "spectral_refresh": int(refresh)}


def _gamma64(k: int) -> float:
    u = np.finfo(float).eps / 2
    return k * u / (1 - k * u)


def _top_eigenvalue_bound(gram: np.ndarray, rows: int) -> float:
    """An upper bound on lambda_max of a Gram matrix sum_i z_i z_i^T computed in float64: LAPACK's eigenvalue
    has a backward error of a few F u ||G||, and the Gram's own sums err by gamma_rows tr(G) (|Z|^T |Z| has
    norm <= tr(G)); both are added."""
    F = gram.shape[0]
    top = float(np.linalg.eigvalsh(gram)[-1])
    eps = np.finfo(float).eps
    top += 4 * F * eps * max(abs(top), float(np.abs(gram).max())) + (rows + 2) * eps * float(np.trace(gram))
    return max(top, 0.0)


def _gram_change_top(change: RowChange) -> float:
    """An upper bound on lambda_max(N^T N - O^T O - R^T R) for a request's changed rows (new N, old O) and
    removed rows R. With M = [N; O; R], J = diag(1, -1, -1) and the QR factorisation M^T = Q T, the matrix
    M^T J M = Q (T J T^T) Q^T has the eigenvalues of the small symmetric T J T^T (plus zeros): computed
    exactly, plus a margin for Householder QR's backward error (||dM||_F <= 16 F k u ||M||_F, generously)
    and the eigenvalue's. Beyond 1024 rows: 2 ||O||_F ||N - O||_F + ||N - O||_F^2 (removed rows only lower it)."""
    new, old, removed = change.new, change.old, change.removed
    m = np.vstack([new, old, removed])
    if m.shape[0] == 0:
        return 0.0
    eps = np.finfo(float).eps
    mass = float((m * m).sum())                         # ||M||_F^2
    if m.shape[0] > 1024:
        d = float(np.linalg.norm(new - old))
        return (2 * float(np.linalg.norm(old)) * d + d * d) * (1 + 8 * eps * m.size)
    signs = np.r_[np.ones(len(new)), -np.ones(len(old) + len(removed))]
    t = np.linalg.qr(m.T, mode="r")
    top = float(np.linalg.eigvalsh((t * signs) @ t.T)[-1])
    qr_error = 16 * m.shape[0] * m.shape[1] * eps
    return max(top, 0.0) + (2 * qr_error + qr_error ** 2 + 8 * m.shape[0] * eps) * mass
