"""Generalised-PageRank propagation with per-level reserves and residues (ScaleGUN, Lu Yi & Zhewei Wei,
ICLR 2025, Algorithms 2-4), vectorised with scipy.sparse/numpy instead of the authors' C++ push loops.

Target embedding: Z = sum_l w_l (D^-1/2 A D^-1/2)^l X with A, D including self-loops. Per level l the
state keeps reserves Q[l] and residues R[l] (n x F) under the invariant (Lemma 3.2)

    Q[0] + R[0] = D^1/2 X,        Q[l] + R[l] = A D^-1 Q[l-1]   (0 < l <= L),

and every |R[l]| <= r_max after a push, so ||Z_hat - Z|| <= sqrt(n) L r_max per column (Lemma 3.1).
A push moves a residue into the reserve and spreads r/d(u) to the next level of u's neighbours; a
node is pushed at most once per level, so one level is one sparse product over the pushed rows.
Removals fix the residues of the touched nodes so the invariant holds on the new graph, then push
from those nodes only (lazy local propagation): the cost depends on the change, not on n."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def symmetric_adjacency(edge_index: np.ndarray, num_nodes: int) -> sp.csr_matrix:
    """Undirected 0/1 adjacency with a self-loop on every node (duplicates and given loops merged)."""
    src, dst = np.asarray(edge_index[0], dtype=np.int64), np.asarray(edge_index[1], dtype=np.int64)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    loops = np.arange(num_nodes, dtype=np.int64)
    rows = np.concatenate([src, dst, loops])
    cols = np.concatenate([dst, src, loops])
    a = sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(num_nodes, num_nodes))
    a.data[:] = 1.0   # duplicates summed by the constructor: back to 0/1
    a.sort_indices()
    return a


def exact_propagation(adj: sp.csr_matrix, x: np.ndarray, weights) -> np.ndarray:
    """Z = sum_l w_l (D^-1/2 A D^-1/2)^l X by cumulative power iteration (the baselines' re-propagation)."""
    deg = np.asarray(adj.sum(1)).ravel()
    inv_sqrt = 1.0 / np.sqrt(deg)
    norm = sp.diags(inv_sqrt) @ adj @ sp.diags(inv_sqrt)
    h = np.array(x, dtype=np.float64, copy=True)
    z = weights[0] * h
    for w in weights[1:]:
        h = norm @ h
        if w:
            z += w * h
    return z


class GPRPropagator:
    """Reserves/residues of one graph (one client's subgraph, or a whole graph).

    ``adj``: symmetric CSR with self-loops (``symmetric_adjacency``); ``x``: n x F features;
    ``weights``: w_0..w_L; ``r_max``: absolute residue threshold (0 = exact)."""

    def __init__(self, adj: sp.csr_matrix, x: np.ndarray, weights, r_max: float):
        self.adj = adj.tocsr().astype(np.float64)
        self.adj.sort_indices()
        self.x = np.array(x, dtype=np.float64, copy=True)
        self.weights = np.asarray(weights, dtype=np.float64)
        if self.weights.ndim != 1 or self.weights.size < 1:
            raise ValueError("weights must list w_0..w_L")
        self.L = self.weights.size - 1
        self.r_max = float(r_max)
        self.n, self.F = self.x.shape
        self.deg = np.asarray(self.adj.sum(1)).ravel()
        self.Q = np.zeros((self.L + 1, self.n, self.F))
        self.R = np.zeros((self.L + 1, self.n, self.F))
        self.R[0] = np.sqrt(self.deg)[:, None] * self.x
        self.Z = np.zeros((self.n, self.F))
        self.pushes = 0   # rows pushed so far (a cost counter for reports)
        self.push(np.arange(self.n))

    # -- pushing ---------------------------------------------------------------------------------
    def push(self, candidates) -> np.ndarray:
        """Algorithm 2 (BasicProp) restricted to ``candidates`` (rows whose residue may exceed r_max or
        whose degree changed; all others are known to be below it). Returns the rows of Z that changed.

        As in the reference code, pushes from level L-1 go straight into the last level's reserve
        (it keeps no residue), and Z is updated incrementally on the rows that receive mass: the
        cost follows the touched rows, never n."""
        cand = np.unique(np.asarray(candidates, dtype=np.int64))
        inv_sqrt = 1.0 / np.sqrt(self.deg)
        rows_next = cand
        changed = [cand]
        for lvl in range(self.L):
            rows, rows_next = rows_next, cand
            if rows.size == 0:
                continue
            res = self.R[lvl, rows]
            over = np.abs(res) > self.r_max
            hit = over.any(1)
            if not hit.any():
                continue
            rows, res, over = rows[hit], res[hit], over[hit]
            moved = np.where(over, res, 0.0)
            del res, over
            self.Q[lvl, rows] += moved
            self.R[lvl, rows] -= moved
            if self.weights[lvl]:
                self.Z[rows] += self.weights[lvl] * moved * inv_sqrt[rows][:, None]
            self.pushes += rows.size
            changed.append(rows)
            # spread moved/d(u) to every neighbour of u at the next level: one small sparse product
            block = self.adj[rows]                     # |rows| x n, symmetric A so row u = N(u)
            targets, local = self._compact(block.indices)
            spread = sp.csr_matrix((block.data, local, block.indptr), shape=(rows.size, targets.size)).T
            mass = spread @ (moved / self.deg[rows][:, None])
            if lvl + 1 < self.L:
                self.R[lvl + 1, targets] += mass
                rows_next = self._union(cand, targets)
            else:
                self.Q[self.L, targets] += mass
                if self.weights[self.L]:
                    mass *= (self.weights[self.L] * inv_sqrt[targets])[:, None]
                    self.Z[targets] += mass
                changed.append(targets)
        # line 6: the last level keeps no residue (only candidates can hold one here)
        self.Q[self.L, cand] += self.R[self.L, cand]
        self.R[self.L, cand] = 0.0
        self._refresh_z(cand)      # degrees of candidates may have changed: recompute their rows
        return self._union(*changed)

    def _compact(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Distinct ids (sorted) and each id's position among them, in O(len + n) without sorting."""
        if not hasattr(self, "_pos"):
            self._pos = np.zeros(self.n, dtype=np.int64)
            self._mark = np.zeros(self.n, dtype=bool)
        self._mark[ids] = True
        uniq = np.flatnonzero(self._mark)
        self._mark[uniq] = False
        self._pos[uniq] = np.arange(uniq.size)
        return uniq, self._pos[ids]

    def _union(self, *parts: np.ndarray) -> np.ndarray:
        return self._compact(np.concatenate(parts))[0]

    def _refresh_z(self, rows: np.ndarray) -> None:
        if rows.size == 0:
            return
        q = np.zeros((rows.size, self.F))
        for lvl, w in enumerate(self.weights):
            if w:
                q += w * self.Q[lvl, rows]
        self.Z[rows] = q / np.sqrt(self.deg[rows])[:, None]

    # -- removals ----------------------------------------------------------------------------------
    def remove_edges(self, edges) -> np.ndarray:
        """Algorithm 4 (batch edge removal; one edge is a batch of one). ``edges``: (2, k) or (k, 2)
        node pairs of existing non-loop edges. Returns the rows of Z that changed."""
        e = np.asarray(edges, dtype=np.int64)
        if e.ndim == 1:
            e = e.reshape(2, 1)
        if e.shape[0] != 2:
            e = e.T
        u, v = e
        if np.any(u == v):
            raise ValueError("self-loops cannot be removed")
        if np.unique(np.minimum(u, v) * self.n + np.maximum(u, v)).size != u.size:
            raise ValueError("an edge appears twice in the batch")
        pos_uv, pos_vu = self._positions(u, v), self._positions(v, u)
        if np.any(pos_uv < 0) or np.any(pos_vu < 0):
            bad = np.flatnonzero((pos_uv < 0) | (pos_vu < 0))[0]
            raise ValueError(f"edge ({u[bad]}, {v[bad]}) is not in the graph")
        touched = np.unique(np.concatenate([u, v]))
        idx = np.searchsorted(touched, np.concatenate([u, v]))
        nbr = np.searchsorted(touched, np.concatenate([v, u]))
        lost = np.bincount(idx, minlength=touched.size).astype(np.float64)
        old_deg = self.deg[touched].copy()
        new_deg = old_deg - lost
        # sum over removed neighbours t of q^(l-1)(t)/d_old(t), read before any rescaling
        removed = sp.csr_matrix((np.ones(idx.size), (idx, nbr)), shape=(touched.size, touched.size))
        lost_in = [removed @ (self.Q[lvl - 1, touched] / old_deg[:, None]) for lvl in range(1, self.L + 1)]
        # graph change: zero the entries in place (explicit zeros cost nothing in the pushes)
        self.adj.data[pos_uv] = 0.0
        self.adj.data[pos_vu] = 0.0
        self.deg[touched] = new_deg
        scale = (new_deg / old_deg)[:, None]
        for lvl in range(self.L + 1):
            q_old = self.Q[lvl, touched]
            q_new = q_old * scale   # q(u)/d(u), what neighbours read, stays unchanged
            self.Q[lvl, touched] = q_new
            if lvl == 0:
                self.R[0, touched] = np.sqrt(new_deg)[:, None] * self.x[touched] - q_new
            else:
                self.R[lvl, touched] += q_old - q_new - lost_in[lvl - 1]
        return self.push(touched)

    def remove_node_features(self, nodes) -> np.ndarray:
        """Feature removal: x(u) = 0, so r^(0)(u) = -q^(0)(u); pushes from u. Returns changed rows."""
        nodes = np.unique(np.asarray(nodes, dtype=np.int64))
        self.x[nodes] = 0.0
        self.R[0, nodes] = -self.Q[0, nodes]
        return self.push(nodes)

    def remove_nodes(self, nodes) -> np.ndarray:
        """Node removal = remove every incident edge (batch), then the node's features."""
        nodes = np.unique(np.asarray(nodes, dtype=np.int64))
        edges = self.incident_edges(nodes)
        changed = [self.remove_edges(edges)] if edges.shape[1] else []
        changed.append(self.remove_node_features(nodes))
        return np.unique(np.concatenate(changed))

    # -- graph queries ----------------------------------------------------------------------------
    def _positions(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """Index into adj.data of each (row, col) entry with non-zero weight, -1 where absent."""
        out = np.full(rows.size, -1, dtype=np.int64)
        ind, ptr, data = self.adj.indices, self.adj.indptr, self.adj.data
        for i, (r, c) in enumerate(zip(rows, cols)):
            lo, hi = ptr[r], ptr[r + 1]
            k = lo + np.searchsorted(ind[lo:hi], c)
            if k < hi and ind[k] == c and data[k] != 0.0:
                out[i] = k
        return out

    def edges(self) -> np.ndarray:
        """Current undirected non-loop edges as (2, m) with u < v."""
        a = sp.triu(self.adj, k=1).tocoo()
        keep = a.data != 0
        return np.vstack([a.row[keep], a.col[keep]]).astype(np.int64)

    def incident_edges(self, nodes) -> np.ndarray:
        pairs = set()
        for u in np.asarray(nodes, dtype=np.int64):
            lo, hi = self.adj.indptr[u], self.adj.indptr[u + 1]
            for t, w in zip(self.adj.indices[lo:hi], self.adj.data[lo:hi]):
                if w != 0.0 and t != u:
                    pairs.add((min(u, t), max(u, t)))
        return np.array(sorted(pairs), dtype=np.int64).reshape(-1, 2).T

    def current_adjacency(self) -> sp.csr_matrix:
        a = self.adj.copy()
        a.eliminate_zeros()
        return a

    # -- outputs ------------------------------------------------------------------------------------
    def embedding(self) -> np.ndarray:
        return self.Z

    def exact_embedding(self) -> np.ndarray:
        """Z on the current graph and features by exact power iteration (r_max = 0)."""
        return exact_propagation(self.current_adjacency(), self.x, self.weights)

    def residue_colsum(self, absolute: bool = False) -> np.ndarray:
        """1^T R with R = sum_l R^(l) (signed, as in the paper, or of |R| - conservative)."""
        r = np.abs(self.R) if absolute else self.R
        return r.sum(axis=(0, 1))

    def error_bound(self) -> float:
        """Lemma 3.1: per-column ||Z_hat - Z||_2 <= sqrt(n) L r_max."""
        return float(np.sqrt(self.n) * self.L * self.r_max)

    def invariant_error(self) -> float:
        """Largest violation of Lemma 3.2 on the current graph (float noise when the state is sound)."""
        a = self.current_adjacency()
        p = a @ sp.diags(1.0 / self.deg)
        err = np.abs(self.Q[0] + self.R[0] - np.sqrt(self.deg)[:, None] * self.x).max()
        for lvl in range(1, self.L + 1):
            err = max(err, np.abs(self.Q[lvl] + self.R[lvl] - p @ self.Q[lvl - 1]).max())
        return float(err)

    def max_residue(self) -> float:
        return float(np.abs(self.R).max())
