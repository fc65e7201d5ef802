"""``unlearning.solver=factored``: the Newton step of a deletion request without a pass over the training rows.

The server keeps, per class, the Hessian H0 = sum_i s_i(W0) z_i z_i^T + lam n_t I at an anchor W0 and its
Cholesky factor (built once from the clients' F x F Hessians, as the reference code builds its Hessians
per batch, and again after a retraining). The clients remember the anchor values of the training rows a
request changed (or removed) since. A request then solves, by conjugate gradients preconditioned with the
anchor's factor (1-3 iterations), with the operator

    H_A v = H0 v + sum_{i changed} s_i(W0) (z_i z_i^T - z0_i z0_i^T) v - lam (n_t0 - n_t) v,

the Hessian at W0 on the *current* data: only the changed rows are touched. What H_A leaves out of the
true Hessian at the current W is the curvature drift of every row, sum_i (s_i(W) - s_i(W0)) z_i z_i^T v;
since |s'| <= gamma2 (Assumption 4.1) and |z_i^T (w - w0)| <= M ||w - w0|| with M >= max_i ||z_i||, per class

    ||(H(W) - H_A) v_c|| <= gamma2 ||Z|| M ||w_c - w0_c|| ||Z v_c||,

which the accountant adds to the step's error with the solve residual ||H_A v - Delta|| (computed exactly).
When that drift would take the bound over the budget the anchor is rebuilt at the current W (drift 0)
before a retraining is considered; it is also rebuilt when the changed rows reach a quarter of the
training rows (their corrections then cost a quarter of a pass)."""
from __future__ import annotations

import time

import numpy as np
import scipy.linalg

from fgx.unlearning.logreg import LocalData, batched_cg, signed_labels

GAMMA2 = 0.25


class AnchorRows:
    """A client's training rows changed since the anchor: their anchor values (node id -> row)."""

    def __init__(self):
        self.rows: dict[int, np.ndarray] = {}

    def remember(self, nodes: np.ndarray, old: np.ndarray) -> None:
        for u, row in zip(nodes.tolist(), old):
            if u not in self.rows:
                self.rows[u] = row.copy()

    def __len__(self) -> int:
        return len(self.rows)

    def correction(self, party, num_classes: int, w0: np.ndarray, v: np.ndarray) -> np.ndarray:
        """sum over the remembered rows of s(W0) (z z^T - z0 z0^T) v (removed rows: z = 0)."""
        nodes = np.fromiter(self.rows, dtype=np.int64, count=len(self.rows))
        z0 = np.stack([self.rows[u] for u in nodes.tolist()])
        ys = signed_labels(party.y[nodes], num_classes)
        local = party.local_data(num_classes)
        ids = party.__dict__["_ids"]
        pos = np.searchsorted(ids, nodes)
        present = (pos < ids.size) & (ids[np.minimum(pos, max(ids.size - 1, 0))] == nodes) if ids.size else \
            np.zeros(nodes.size, dtype=bool)
        z = np.zeros_like(z0)
        z[present] = local.z[pos[present]]
        return LocalData(z, ys).hvp(w0, v) - LocalData(z0, ys).hvp(w0, v)


class FactoredHessian:
    """The anchor (W0, per-class Cholesky factors of H0, n_t0, the row-norm bound M) and its solves."""

    def __init__(self, server):
        self.server = server
        self.w0 = None
        self.builds = 0

    def build(self) -> float:
        """(Re)build the anchor at the current W: one pass over the training rows at every client."""
        t0 = time.perf_counter()
        s = self.server
        self.w0 = s.W.copy()
        s.broadcast("weights", self.w0)
        agg = s.gather("newton_stats", lambda p: {"hessian": p.local_data(s.C).hessians(p.last_w)})
        self.n_t0 = s.num_train()
        F = self.w0.shape[0]
        self.h0 = agg["hessian"] + s.lam * self.n_t0 * np.eye(F)[None]
        self.factors = [scipy.linalg.cho_factor(h) for h in self.h0]
        m = s.gather("newton_stats", lambda p: {"max_row_norm": np.array(
            [np.linalg.norm(p.local_data(s.C).z, axis=1).max() if p.num_train() else 0.0])}, reduce="max")
        for p in s.parties:
            p.anchor = AnchorRows()
            p.row_norm_max = float(np.linalg.norm(p.local_data(s.C).z, axis=1).max()) if p.num_train() else 0.0
        self.row_norm_max = float(m["max_row_norm"][0])
        self.builds += 1
        return time.perf_counter() - t0

    def stale(self) -> bool:
        """Rebuild before solving: no anchor yet, or the changed rows reach a quarter of the training rows."""
        if self.w0 is None:
            return True
        return sum(len(p.anchor) for p in self.server.parties) > self.n_t0 / 4

    def operator(self, v: np.ndarray) -> np.ndarray:
        s = self.server
        out = np.einsum("cij,jc->ic", self.h0, v)
        touched = [p for p in s.parties if len(p.anchor)]
        if touched:
            s.broadcast("hvp_vector", v, touched)
            out += s.gather("hvp", lambda p: {"hv": p.anchor.correction(p, s.C, self.w0, v)}, touched)["hv"]
        return out - s.lam * (self.n_t0 - s.num_train()) * v

    def precondition(self, r: np.ndarray) -> np.ndarray:
        return np.stack([scipy.linalg.cho_solve(f, r[:, c]) for c, f in enumerate(self.factors)], axis=1)

    def solve(self, delta: np.ndarray) -> dict:
        v, iters, _ = batched_cg(self.operator, delta, tol=1e-10, max_iter=100, precond=self.precondition)
        resid = np.linalg.norm(self.operator(v) - delta, axis=0)
        return {"v": v, "cg_iterations": iters, "solve_residual": resid}

    def drift(self, z_norm: float, zv_norm: np.ndarray) -> np.ndarray:
        """gamma2 ||Z|| M ||w_c - w0_c|| ||Z v_c|| per class: the curvature the anchor leaves out."""
        m = max([self.row_norm_max] + [p.row_norm_max for p in self.server.parties])
        return GAMMA2 * z_norm * m * np.linalg.norm(self.server.W - self.w0, axis=0) * zv_norm
