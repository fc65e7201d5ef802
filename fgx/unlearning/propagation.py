"""Generalised-PageRank propagation with per-level reserves and residues (ScaleGUN, Lu Yi & Zhewei Wei,
ICLR 2025, Algorithms 2-4), vectorised with scipy.sparse/numpy instead of the authors' C++ push loops.

Target embedding: Z = sum_l w_l (D^-1/2 A D^-1/2)^l X with A, D including self-loops. Per level l the
state keeps reserves Q[l] and residues R[l] (n x F) under the invariant (Lemma 3.2)

    Q[0] + R[0] = D^1/2 X,        Q[l] + R[l] = A D^-1 Q[l-1]   (0 < l <= L),

and every |R[l]| <= r_max after a push, so ||Z_hat - Z|| <= sqrt(n) L r_max per column (Lemma 3.1).
A push moves a residue into the reserve and spreads r/d(u) to the next level of u's neighbours; a
node is pushed at most once per level, so one level is one sparse product over the pushed rows.
Removals fix the residues of the touched nodes so the invariant holds on the new graph, then push
from those nodes only (lazy local propagation): the cost depends on the change, not on n.

Memory (what makes a 2.5M-node, 60M-edge graph fit in a few GB):
- reserves Q are dense (L+1) x n x F in ``dtype`` (float32 by default); X is not kept, it is
  (Q[0] + R[0]) / sqrt(d), and Z is not kept, it is sum_l w_l D^-1/2 Q[l] read row by row;
- residues are row-sparse (``ResidueRows``): after a push nearly every row is zero, so only rows that
  hold a residue are stored; the last level keeps none (pushes into it go straight to Q[L]);
- the residue column sums 1^T R (signed and of |R|, the certificate's approximation term) are kept
  up to date by every write, so reading them costs O(F), never a scan over the residues;
- the adjacency is CSR with int32 indices and float32 0/1 entries; a removed edge is an explicit
  zero (no re-allocation), and full passes (the initial push, exact propagation) run over row
  chunks so no dense temporary larger than a chunk is created."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

DTYPES = {"float32": np.float32, "float64": np.float64}
F64_UNIT = 2.0 ** -53 * 1.01  # unit roundoff of float64, with slack for the second-order terms of gamma_k
CHUNK_NNZ = 1 << 22          # adjacency entries per chunk of a full pass (bounds the temporaries)


def _dtype(dtype) -> np.dtype:
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
        return np.dtype(DTYPES[dtype])
    return np.dtype(dtype)


def gamma(k: float, unit: float) -> float:
    """Higham's gamma_k = k u / (1 - k u): the relative error bound of k rounded operations in a row."""
    if k * unit >= 1:
        raise ValueError(f"gamma_{k} is undefined for unit roundoff {unit}")
    return k * unit / (1.0 - k * unit)


def propagation_rounding_factor(weights, max_terms: int, unit: float) -> float:
    """eta with |Z_computed - Z| <= sum_l eta_l A_hat^l |X| <= eta A_hat^l |X| entrywise, for ``exact_propagation``
    run in a dtype of unit roundoff ``unit`` (docs/unlearning.md, *Theorem 2*). One level multiplies by the
    rounded scales 1/sqrt(d) (two roundings each) and sums at most ``max_terms`` products: relative error
    g = gamma_(max_terms + 6) of A_hat |h|; after l levels the error is ((1 + g)^l - 1) A_hat^l |X|, and the
    weighted sum of the levels adds gamma_(L + 2) of sum_l |w_l| |h_l|. Returns sum_l eta_l."""
    w = np.abs(np.asarray(weights, dtype=np.float64))
    g = gamma(max_terms + 6, unit)
    gl = gamma(w.size + 1, unit)
    levels = np.arange(w.size)
    return float((w * (((1 + g) ** levels - 1) * (1 + gl) + gl)).sum())


def symmetric_adjacency(edge_index, num_nodes: int) -> sp.csr_matrix:
    """Undirected 0/1 adjacency with a self-loop on every node (duplicates and given loops merged).

    Built by sorting int64 keys u*n+v rather than through scipy's COO constructor: a 60M-edge graph
    needs about 2 GB of transient memory instead of about 6 GB. Indices are int32 where they fit."""
    n = int(num_nodes)
    ei = np.asarray(edge_index)
    if ei.ndim != 2 or ei.shape[0] != 2:
        raise ValueError(f"edge_index must have shape (2, m), got {ei.shape}")
    src, dst = ei[0].astype(np.int64, copy=False), ei[1].astype(np.int64, copy=False)
    if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= n):
        raise ValueError(f"edge_index refers to nodes outside 0..{n - 1}")
    keep = src != dst
    m = int(keep.sum())
    key = np.empty(2 * m + n, dtype=np.int64)
    s, d = src[keep], dst[keep]
    np.multiply(s, n, out=key[:m])
    key[:m] += d
    np.multiply(d, n, out=key[m:2 * m])
    key[m:2 * m] += s
    del s, d, keep
    key[2 * m:] = np.arange(n, dtype=np.int64) * (n + 1)
    key.sort()
    if key.size > 1:
        first = np.empty(key.size, dtype=bool)
        first[0] = True
        np.not_equal(key[1:], key[:-1], out=first[1:])
        key = key[first]
        del first
    idx_dtype = np.int32 if max(n, key.size) < 2 ** 31 - 1 else np.int64
    indptr = np.searchsorted(key, np.arange(n + 1, dtype=np.int64) * n).astype(idx_dtype)
    indices = np.empty(key.size, dtype=idx_dtype)
    for lo in range(0, key.size, CHUNK_NNZ):
        indices[lo:lo + CHUNK_NNZ] = key[lo:lo + CHUNK_NNZ] % n
    del key
    a = sp.csr_matrix((np.ones(indices.size, dtype=np.float32), indices, indptr), shape=(n, n))
    a.has_sorted_indices = True
    return a


def _row_chunks(indptr: np.ndarray, budget: int = CHUNK_NNZ):
    """Contiguous row ranges holding about ``budget`` adjacency entries each."""
    n = indptr.size - 1
    lo = 0
    while lo < n:
        hi = int(np.searchsorted(indptr, indptr[lo] + budget, side="right")) - 1
        hi = min(max(hi, lo + 1), n)
        yield lo, hi
        lo = hi


def scaled_product(adj: sp.csr_matrix, h: np.ndarray, col_scale: np.ndarray, row_scale=None,
                   out: np.ndarray | None = None) -> np.ndarray:
    """diag(row_scale) A diag(col_scale) h, over row chunks (no n x F temporary besides ``out``).
    Explicit zeros in A (removed edges) contribute nothing."""
    n = adj.shape[0]
    out = np.empty((n, h.shape[1]), dtype=h.dtype) if out is None else out
    col_scale = col_scale.astype(h.dtype, copy=False)
    for lo, hi in _row_chunks(adj.indptr):
        a, b = adj.indptr[lo], adj.indptr[hi]
        ind = adj.indices[a:b]
        blk = sp.csr_matrix((adj.data[a:b] * col_scale[ind], ind, adj.indptr[lo:hi + 1] - a),
                            shape=(hi - lo, adj.shape[1]))
        res = blk @ h
        if row_scale is not None:
            res *= row_scale[lo:hi, None].astype(h.dtype, copy=False)
        out[lo:hi] = res
    return out


def exact_propagation(adj: sp.csr_matrix, x: np.ndarray, weights, deg: np.ndarray | None = None,
                      dtype=None) -> np.ndarray:
    """Z = sum_l w_l (D^-1/2 A D^-1/2)^l X by cumulative power iteration (the baselines' re-propagation).

    ``deg``: degrees with self-loops (default: row sums of ``adj``); ``dtype``: of the computation
    (default: that of ``x``). Holds at most three n x F arrays (x, the current power, Z)."""
    dt = _dtype(dtype) if dtype is not None else np.result_type(np.asarray(x).dtype, np.float32)
    deg = np.asarray(adj.sum(1), dtype=np.float64).ravel() if deg is None else deg
    inv_sqrt = 1.0 / np.sqrt(deg)
    weights = [float(w) for w in weights]
    h = np.asarray(x, dtype=dt)
    z = weights[0] * h if weights[0] else None
    for lvl in range(1, len(weights)):
        if not any(weights[lvl:]):
            break
        h = scaled_product(adj, h, inv_sqrt, inv_sqrt)
        w = weights[lvl]
        if w:
            if z is None:
                z = h if (w == 1.0 and lvl == len(weights) - 1) else w * h
            else:
                z += w * h
    return np.zeros(np.shape(x), dtype=dt) if z is None else z


class ResidueRows:
    """Row-sparse residues of one level: only rows with a non-zero residue are stored (slots of a
    growable block); column sums of R and |R| are updated on every write from the values actually
    stored, so they match the state to float64 summation error without ever scanning it."""

    def __init__(self, n: int, F: int, dtype):
        self.n, self.F, self.dtype = n, F, np.dtype(dtype)
        self.slot = np.full(n, -1, dtype=np.int64)
        self.owner = np.empty(0, dtype=np.int64)
        self.data = np.empty((0, F), dtype=self.dtype)
        self.free = np.empty(0, dtype=np.int64)   # a stack of released slots
        self.top = 0
        self.used = 0                       # slots handed out (some may be on the free stack)
        self.colsum = np.zeros(F)           # sum_u R(u), float64
        self.abssum = np.zeros(F)           # sum_u |R(u)|
        self.sum_error = np.zeros(F)        # a bound on the float64 summation error of colsum
        self.abs_error = np.zeros(F)        # ... and of abssum

    def __len__(self) -> int:
        return int((self.slot >= 0).sum())

    @property
    def nbytes(self) -> int:
        return self.slot.nbytes + self.owner.nbytes + self.data.nbytes

    def get(self, rows: np.ndarray) -> np.ndarray:
        out = np.zeros((rows.size, self.F), dtype=self.dtype)
        s = self.slot[rows]
        have = s >= 0
        if have.any():
            out[have] = self.data[s[have]]
        return out

    def put(self, rows: np.ndarray, new: np.ndarray, old: np.ndarray | None = None) -> None:
        """Set the residues of distinct ``rows`` to ``new`` (``old``: their current values, if known)."""
        if rows.size == 0:
            return
        old = self.get(rows) if old is None else old
        self.colsum += new.sum(0, dtype=np.float64) - old.sum(0, dtype=np.float64)
        moved = np.abs(new).sum(0, dtype=np.float64) + np.abs(old).sum(0, dtype=np.float64)
        self.abssum += np.abs(new).sum(0, dtype=np.float64) - np.abs(old).sum(0, dtype=np.float64)
        # recursive float64 summation of rows.size terms, then two more additions (Higham's gamma_k)
        self.sum_error += F64_UNIT * ((rows.size + 2) * moved + 2 * np.abs(self.colsum))
        self.abs_error += F64_UNIT * ((rows.size + 2) * moved + 2 * self.abssum)
        nz = np.any(new != 0, axis=1)
        s = self.slot[rows]
        gone = (~nz) & (s >= 0)
        if gone.any():
            self._release(s[gone])
            self.slot[rows[gone]] = -1
        need = nz & (s < 0)
        if need.any():
            s[need] = self._allocate(rows[need])
        if nz.any():
            self.data[s[nz]] = new[nz]

    def add(self, rows: np.ndarray, delta: np.ndarray) -> None:
        old = self.get(rows)
        self.put(rows, old + delta, old)

    def _release(self, slots: np.ndarray) -> None:
        if self.top + slots.size > self.free.size:
            grown = np.empty(max(2 * self.free.size, self.top + slots.size, 64), dtype=np.int64)
            grown[:self.top] = self.free[:self.top]
            self.free = grown
        self.free[self.top:self.top + slots.size] = slots
        self.top += slots.size

    def _allocate(self, rows: np.ndarray) -> np.ndarray:
        k = rows.size
        got = min(k, self.top)
        take = self.free[self.top - got:self.top].copy()
        self.top -= got
        extra = k - got
        if extra:
            if self.used + extra > self.data.shape[0]:
                cap = min(max(2 * self.data.shape[0], self.used + extra, 64), self.n)
                cap = max(cap, self.used + extra)
                data = np.empty((cap, self.F), dtype=self.dtype)
                data[:self.used] = self.data[:self.used]
                owner = np.empty(cap, dtype=np.int64)
                owner[:self.used] = self.owner[:self.used]
                self.data, self.owner = data, owner
            take = np.concatenate([take, np.arange(self.used, self.used + extra, dtype=np.int64)])
            self.used += extra
        self.slot[rows] = take
        self.owner[take] = rows
        return take

    def stored_rows(self) -> np.ndarray:
        return np.flatnonzero(self.slot >= 0)

    def dense(self) -> np.ndarray:
        out = np.zeros((self.n, self.F), dtype=self.dtype)
        rows = self.stored_rows()
        out[rows] = self.data[self.slot[rows]]
        return out

    def max_abs(self) -> float:
        rows = self.stored_rows()
        return float(np.abs(self.data[self.slot[rows]]).max()) if rows.size else 0.0

    def weighted_sq_norms(self, weight: np.ndarray) -> np.ndarray:
        """Per column sum_u weight(u) R(u)^2 (float64), over the stored rows only."""
        rows = self.stored_rows()
        if rows.size == 0:
            return np.zeros(self.F)
        r = self.data[self.slot[rows]].astype(np.float64)
        return (weight[rows, None] * r * r).sum(0)


class GraphState:
    """The current graph of a propagation state: CSR adjacency with self-loops whose removed edges
    are explicit zeros, and degrees (self-loop included). Queries never list all edges."""

    adj: sp.csr_matrix
    deg: np.ndarray
    n: int

    def _own_adjacency(self, adj: sp.csr_matrix) -> None:
        adj = adj.tocsr()
        if not adj.has_sorted_indices:
            adj = adj.sorted_indices()
        # the structure is shared with the caller; the entries are copied, since removals zero them
        self.adj = sp.csr_matrix((adj.data.astype(np.float32, copy=True), adj.indices, adj.indptr), shape=adj.shape)
        self.adj.has_sorted_indices = True
        self.deg = np.asarray(self.adj.sum(1), dtype=np.float64).ravel()

    @staticmethod
    def _edge_pairs(edges) -> tuple[np.ndarray, np.ndarray]:
        e = np.asarray(edges, dtype=np.int64)
        if e.ndim == 1:
            e = e.reshape(2, 1)
        if e.shape[0] != 2:
            e = e.T
        return e[0], e[1]

    def _check_edges(self, u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Validate a batch of edges to remove; returns the positions of (u, v) and (v, u) in adj.data."""
        if np.any(u == v):
            raise ValueError("self-loops cannot be removed")
        if np.any(np.minimum(u, v) < 0) or np.any(np.maximum(u, v) >= self.n):
            raise ValueError(f"an edge refers to a node outside 0..{self.n - 1}")
        if np.unique(np.minimum(u, v) * self.n + np.maximum(u, v)).size != u.size:
            raise ValueError("an edge appears twice in the batch")
        pos_uv, pos_vu = self._positions(u, v), self._positions(v, u)
        if np.any(pos_uv < 0) or np.any(pos_vu < 0):
            bad = np.flatnonzero((pos_uv < 0) | (pos_vu < 0))[0]
            raise ValueError(f"edge ({u[bad]}, {v[bad]}) is not in the graph")
        return pos_uv, pos_vu

    def _drop_edges(self, u: np.ndarray, v: np.ndarray, pos_uv: np.ndarray, pos_vu: np.ndarray) -> None:
        """Zero the checked entries (explicit zeros cost nothing in products) and lower the degrees."""
        self.adj.data[pos_uv] = 0.0
        self.adj.data[pos_vu] = 0.0
        np.subtract.at(self.deg, np.concatenate([u, v]), 1.0)

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

    def has_edge(self, u: int, v: int) -> bool:
        return bool(self._positions(np.array([u]), np.array([v]))[0] >= 0)

    def neighbours(self, u: int) -> np.ndarray:
        """Current neighbours of u (self excluded)."""
        lo, hi = self.adj.indptr[u], self.adj.indptr[u + 1]
        nb = self.adj.indices[lo:hi][self.adj.data[lo:hi] != 0]
        return nb[nb != u].astype(np.int64)

    def edges(self, nodes=None) -> np.ndarray:
        """Current undirected non-loop edges as (2, m) with u < v; with ``nodes``, those incident to them."""
        ptr = self.adj.indptr.astype(np.int64)
        rows = np.arange(self.n, dtype=np.int64) if nodes is None else np.unique(np.asarray(nodes, dtype=np.int64))
        counts = ptr[rows + 1] - ptr[rows]
        pos = np.repeat(ptr[rows] - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts) + np.arange(counts.sum())
        src = np.repeat(rows, counts)
        dst = self.adj.indices[pos].astype(np.int64)
        keep = (self.adj.data[pos] != 0) & (src != dst)
        a, b = np.minimum(src[keep], dst[keep]), np.maximum(src[keep], dst[keep])
        key = np.unique(a * self.n + b)
        return np.vstack([key // self.n, key % self.n])

    def incident_edges(self, nodes) -> np.ndarray:
        return self.edges(nodes)

    def sample_edges(self, k: int, rng: np.random.Generator, max_neighbours: int | None = None) -> np.ndarray:
        """k distinct current edges (2, k), uniformly at random; with ``max_neighbours``, among the edges
        with an endpoint of fewer neighbours (the paper's low-degree protocol). Never lists all edges."""
        if max_neighbours is not None:
            low = np.flatnonzero((self.deg - 1 < max_neighbours) & (self.deg > 1))
            pool = self.edges(low)
            if pool.shape[1] < k:
                raise ValueError(f"only {pool.shape[1]} edges have an endpoint with fewer than "
                                 f"{max_neighbours} neighbours; {k} requested")
            return pool[:, rng.choice(pool.shape[1], k, replace=False)]
        nnz = self.adj.indptr[-1]
        found: dict[int, None] = {}
        for _ in range(1000):
            pos = rng.integers(0, nnz, max(4 * (k - len(found)), 64))
            src = np.searchsorted(self.adj.indptr, pos, side="right") - 1
            dst = self.adj.indices[pos].astype(np.int64)
            ok = (src < dst) & (self.adj.data[pos] != 0)
            for key in (src[ok] * self.n + dst[ok]).tolist():
                found.setdefault(key)
                if len(found) == k:
                    keys = np.fromiter(found, dtype=np.int64)
                    return np.vstack([keys // self.n, keys % self.n])
        raise ValueError(f"could not sample {k} distinct edges (the graph has {self.num_edges()})")

    def num_edges(self) -> int:
        return int((np.count_nonzero(self.adj.data) - self.n) // 2)

    def current_adjacency(self) -> sp.csr_matrix:
        a = self.adj.copy()
        a.eliminate_zeros()
        return a


class GPRPropagator(GraphState):
    """Reserves/residues of one graph (one client's subgraph, or a whole graph).

    ``adj``: symmetric CSR with self-loops (``symmetric_adjacency``; its structure is shared, its
    entries copied, since removals zero them); ``x``: n x F features (not kept);
    ``weights``: w_0..w_L; ``r_max``: absolute residue threshold (0 = exact); ``dtype``: of the state."""

    def __init__(self, adj: sp.csr_matrix, x: np.ndarray, weights, r_max: float, dtype="float32"):
        self._own_adjacency(adj)
        self.dtype = _dtype(dtype)
        self.weights = np.asarray(weights, dtype=np.float64)
        if self.weights.ndim != 1 or self.weights.size < 2:
            raise ValueError("weights must list w_0..w_L with L >= 1")
        self.L = self.weights.size - 1
        self.r_max = float(r_max)
        self.n, self.F = np.shape(x)
        if self.adj.shape != (self.n, self.n):
            raise ValueError(f"adjacency is {self.adj.shape}, features have {self.n} rows")
        self.pushes = 0   # rows pushed so far (a cost counter for reports)
        self.unit = float(np.finfo(self.dtype).eps) / 2 * 1.01   # unit roundoff, with slack for O(u^2) terms
        self._pos = np.zeros(self.n, dtype=np.int64)
        self._mark = np.zeros(self.n, dtype=bool)
        self.repropagate(x, threshold=self.r_max)

    def repropagate(self, x, threshold: float = 0.0) -> None:
        """Propagate ``x`` over the current graph from a zero state (Algorithm 2 from q = 0). With
        ``threshold=0`` every residue is pushed: the state is exact (no residue is stored, only the
        rounding of the state's dtype is left) - the re-propagation a certified retraining needs.
        Later removals push lazily at ``r_max`` again."""
        self.Q = None
        self.Q = np.zeros((self.L + 1, self.n, self.F), dtype=self.dtype)
        self.R = [ResidueRows(self.n, self.F, self.dtype) for _ in range(self.L)]
        self.rounding = np.zeros(self.F)
        self._x, self._x_gone = x, np.zeros(self.n, dtype=bool)   # the features (a reference, not a copy)
        self._sx, self._qlast, self._implied_error = np.zeros(self.F), np.zeros(self.F), np.zeros(self.F)
        self._initial_push(x, threshold)

    # -- the residues the stored reserves imply, summed exactly -----------------------------------------
    # Summed over all nodes, 1^T (A D^-1 q) = sum_v q_v (sum_u a_uv) / d_v = 1^T q, so the implied residues
    # telescope: sum_l 1^T R*[l] = 1^T D^1/2 X - 1^T Q[L] (R*[L] = A D^-1 Q[L-1] - Q[L], zero in exact
    # arithmetic). Both sums are kept in float64 from the stored values and the original features, so
    # the certificate reads the residues the float32 state really implies, in O(F).
    def implied_residue_colsum(self) -> np.ndarray:
        """sum over levels of 1^T R* (the residues for which Lemma 3.2 holds exactly for the stored
        reserves): equals ``residue_colsum()`` in exact arithmetic; the difference is the state's rounding."""
        return self._sx - self._qlast

    def implied_residue_error(self) -> np.ndarray:
        """A bound on the float64 error of ``implied_residue_colsum`` per column (gamma_k of its sums)."""
        return self._implied_error

    def _sum_in(self, target: np.ndarray, delta: np.ndarray, terms: int, magnitude: np.ndarray) -> None:
        target += delta
        self._implied_error += F64_UNIT * (terms + 2) * magnitude

    def _write_last(self, rows: np.ndarray, new: np.ndarray) -> None:
        """Q[L, rows] = new, keeping 1^T Q[L] (float64, from the stored values)."""
        old = self.Q[self.L, rows].astype(np.float64)
        self.Q[self.L, rows] = new
        stored = self.Q[self.L, rows].astype(np.float64)
        self._sum_in(self._qlast, stored.sum(0) - old.sum(0), 2 * rows.size,
                     np.abs(stored).sum(0) + np.abs(old).sum(0))

    def _features_at(self, rows: np.ndarray) -> np.ndarray:
        """The original features of ``rows`` (float64), zero where they were removed."""
        out = np.asarray(self._x[rows], dtype=np.float64)
        return out * ~self._x_gone[rows, None]

    # -- the rounding of the state (float32 by default) ------------------------------------------------
    # The certificate's approximation term is 2 c1 ||1^T R*|| with R* the residues for which Lemma 3.2
    # holds exactly for the *stored* reserves: R*[0] = D^1/2 X - Q[0], R*[l] = A D^-1 Q[l-1] - Q[l]. Every
    # rounded write makes the tracked R differ from R*; ``rounding`` bounds sum_u |R* - R| per column
    # (summed over levels), so |1^T R*| <= |1^T R| + rounding column by column. Standard error analysis
    # (Higham, Accuracy and Stability, ch. 3): one rounded operation errs by at most u |result|, a sum of
    # k products by gamma_(k+1) = (k+1) u / (1 - (k+1) u) times the sum of the |terms|. A rounding delta
    # of a reserve q_l(v) also moves the level-(l+1) equations of v's neighbours, by sum_u a_uv |delta| / d_v
    # <= |delta| in all: reserves count twice (their own level and the next), residues once. Defects
    # already counted are never amplified (rescalings multiply by d_new / d_old <= 1).
    def _account(self, k: float, values: np.ndarray) -> None:
        if values.size:
            self.rounding += (k * self.unit) * np.abs(values).sum(0, dtype=np.float64)

    def rounding_bound(self) -> np.ndarray:
        """Per column, an upper bound on sum_u |R*(u) - R(u)| over all levels (the state's rounding) plus
        the float64 summation error of the tracked column sums: |1^T R*| <= |1^T R| + this."""
        return self.rounding + sum(r.sum_error for r in self.R)

    # -- the initial push (Algorithm 2 from q = 0, r^(0) = D^1/2 x: every node is a candidate) --------
    def _initial_push(self, x, threshold: float) -> None:
        """Level by level over row chunks. From a zero state the reserve of level l is exactly what
        level l pushed, so the mass reaching level l+1 is A D^-1 Q[l], gathered row chunk by row chunk
        (no n x F temporary). Rounding: r0 = x sqrt(d) rounds twice; row u of A D^-1 Q[l] is a sum of
        deg(u) products of rounded 1/d(v), so it errs by gamma_(deg(u)+2) sum_v a_uv |q_v| / d_v; summed over
        u that is sum_v c_v |q_v| with c_v = (A (deg + 2))_v / d_v (one weighted pass over Q[l])."""
        sq = np.sqrt(self.deg)
        step = max(1, CHUNK_NNZ // max(self.F, 1))
        for lo in range(0, self.n, step):
            hi = min(lo + step, self.n)
            r0 = np.asarray(x[lo:hi], dtype=self.dtype) * sq[lo:hi, None].astype(self.dtype)
            self._account(2, r0)
            exact = np.asarray(x[lo:hi], dtype=np.float64) * sq[lo:hi, None]
            self._sum_in(self._sx, exact.sum(0), self.n, np.abs(exact).sum(0))
            self._settle(0, np.arange(lo, hi), r0, threshold)
        inv_deg = 1.0 / self.deg
        weight = (self.adj @ (self.deg + 2.0)) * inv_deg
        for lvl in range(self.L):
            for lo in range(0, self.n, step):
                q = self.Q[lvl, lo:lo + step]
                self.rounding += self.unit * (weight[lo:lo + step, None] * np.abs(q)).sum(0, dtype=np.float64)
            for lo, hi in _row_chunks(self.adj.indptr):
                mass = scaled_product(self.adj[lo:hi], self.Q[lvl], inv_deg)
                if lvl + 1 < self.L:
                    self._settle(lvl + 1, np.arange(lo, hi), mass, threshold)
                else:
                    self.Q[self.L, lo:hi] = mass
        for lo in range(0, self.n, step):
            last = self.Q[self.L, lo:lo + step].astype(np.float64)
            self._sum_in(self._qlast, last.sum(0), self.n, np.abs(last).sum(0))
        self.pushes += self.n * self.L

    def _settle(self, lvl: int, rows: np.ndarray, res: np.ndarray, threshold: float) -> None:
        """From-zero rows: entries above ``threshold`` become the reserve, the rest stays as residue
        (an exact split: no rounding)."""
        over = np.abs(res) > threshold
        self.Q[lvl, rows] = np.where(over, res, 0)
        res[over] = 0
        left = np.any(res != 0, axis=1)
        if left.any():
            self.R[lvl].put(rows[left], res[left], np.zeros((int(left.sum()), self.F), dtype=self.dtype))

    # -- lazy pushing ------------------------------------------------------------------------------
    def push(self, candidates) -> np.ndarray:
        """Algorithm 2 (BasicProp) restricted to ``candidates`` (rows whose residue may exceed r_max or
        whose degree changed; all others are known to be below it). Returns the rows whose reserves
        changed (a superset of the rows of Z that changed).

        The mass a level spreads is carried to the next level and merged with the stored residues of
        the receiving rows there, so a row that is pushed again is never stored in between. As in the
        reference code, pushes from level L-1 go straight into the last level's reserve."""
        cand = np.unique(np.asarray(candidates, dtype=np.int64))
        changed = [cand]
        inc_rows, inc_mass = np.empty(0, dtype=np.int64), None
        for lvl in range(self.L):
            rows = self._union(cand, inc_rows) if inc_rows.size else cand
            if rows.size == 0:
                continue
            old = self.R[lvl].get(rows)
            res = old.copy()
            if inc_rows.size:
                at = self._pos[inc_rows]                 # _pos still maps rows -> positions (from _union)
                res[at] += inc_mass
                self._account(1, res[at])
            over = np.abs(res) > self.r_max
            hit = over.any(1)
            inc_rows, inc_mass = np.empty(0, dtype=np.int64), None
            if not hit.any():
                self.R[lvl].put(rows, res, old)
                continue
            moved = np.where(over[hit], res[hit], 0).astype(self.dtype, copy=False)
            res[over] = 0
            self.R[lvl].put(rows, res, old)
            del old, res, over
            src = rows[hit]
            self.Q[lvl, src] += moved
            self._account(2, self.Q[lvl, src])        # its own level and the next level's equations
            self.pushes += src.size
            changed.append(src)
            targets, mass = self._spread(src, moved)
            if lvl + 1 < self.L:
                inc_rows, inc_mass = targets, mass
            else:
                self._write_last(targets, self.Q[self.L, targets] + mass)
                self._account(1, self.Q[self.L, targets])
                changed.append(targets)
        return self._union(*changed)

    def _spread(self, rows: np.ndarray, moved: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A D^-1 applied to the pushed rows: (distinct neighbours, mass each receives)."""
        block = self.adj[rows]                     # |rows| x n; symmetric A, so row u = N(u)
        targets, local = self._compact(block.indices)
        spread = sp.csr_matrix((block.data, local, block.indptr), shape=(rows.size, targets.size)).T
        inv_deg = (1.0 / self.deg[rows]).astype(self.dtype)
        # a target sums at most k of the |rows| terms a |moved| / d (each from two rounded products), and
        # sum over targets of the |terms| = sum |moved| (a row has d entries, self-loop included)
        k = int(np.bincount(local).max()) if local.size else 0
        self._account(k + 2, moved)
        return targets, spread @ (moved * inv_deg[:, None])

    def _compact(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Distinct ids (sorted) and each id's position among them, in O(len + n) without sorting."""
        self._mark[ids] = True
        uniq = np.flatnonzero(self._mark)
        self._mark[uniq] = False
        self._pos[uniq] = np.arange(uniq.size)
        return uniq, self._pos[ids]

    def _union(self, *parts: np.ndarray) -> np.ndarray:
        return self._compact(np.concatenate(parts))[0]

    # -- removals ----------------------------------------------------------------------------------
    def remove_edges(self, edges) -> np.ndarray:
        """Algorithm 4 (batch edge removal; one edge is a batch of one). ``edges``: (2, k) or (k, 2)
        node pairs of existing non-loop edges. Returns the rows whose reserves changed."""
        u, v = self._edge_pairs(edges)
        pos_uv, pos_vu = self._check_edges(u, v)
        touched = np.unique(np.concatenate([u, v]))
        idx = np.searchsorted(touched, np.concatenate([u, v]))
        nbr = np.searchsorted(touched, np.concatenate([v, u]))
        lost = np.bincount(idx, minlength=touched.size).astype(np.float64)
        old_deg = self.deg[touched].copy()
        new_deg = old_deg - lost
        # sum over removed neighbours t of q^(l-1)(t)/d_old(t), read before any rescaling
        removed = sp.csr_matrix((np.ones(idx.size, dtype=self.dtype), (idx, nbr)), shape=(touched.size, touched.size))
        inv_old = (1.0 / old_deg).astype(self.dtype)[:, None]
        k = int(lost.max())
        lost_in = []
        for lvl in range(1, self.L + 1):
            terms = self.Q[lvl - 1, touched] * inv_old
            self._account((k + 2) * k, terms)       # a row sums <= k of them; a term is used <= k times
            lost_in.append(removed @ terms)
        x_t = self.features(touched)
        self._drop_edges(u, v, pos_uv, pos_vu)
        grown = (np.sqrt(new_deg) - np.sqrt(old_deg))[:, None] * self._features_at(touched)
        self._sum_in(self._sx, grown.sum(0), touched.size, np.abs(grown).sum(0))
        scale = (new_deg / old_deg).astype(self.dtype)[:, None]
        for lvl in range(self.L + 1):
            q_old = self.Q[lvl, touched]
            q_new = q_old * scale   # q(u)/d(u), what neighbours read, stays unchanged
            if lvl < self.L:
                self._account(4, q_new)             # two roundings, own level and the next level's
            if lvl == 0:
                self.Q[0, touched] = q_new
                target = np.sqrt(new_deg).astype(self.dtype)[:, None] * x_t
                r0 = target - q_new
                self.R[0].put(touched, r0)
                # x_t is recovered as (q + r) / sqrt(d) (3 roundings), times sqrt(d') (2), minus q (1)
                self._account(6, target)
                self._account(1, r0)
            elif lvl < self.L:
                self.Q[lvl, touched] = q_new
                delta = q_old - q_new - lost_in[lvl - 1]
                self.R[lvl].add(touched, delta)
                self._account(3, np.abs(q_old) + np.abs(q_new) + np.abs(lost_in[lvl - 1]))
                self._account(1, self.R[lvl].get(touched))
            else:
                # the last level keeps no residue: q_new + (q_old - q_new - lost) goes into the reserve
                self._write_last(touched, q_old - lost_in[lvl - 1])
                self._account(1, self.Q[lvl, touched])
        return self.push(touched)

    def remove_node_features(self, nodes) -> np.ndarray:
        """Feature removal: x(u) = 0, so r^(0)(u) = -q^(0)(u); pushes from u. Returns changed rows."""
        nodes = np.unique(np.asarray(nodes, dtype=np.int64))
        new = nodes[~self._x_gone[nodes]]
        gone = np.sqrt(self.deg[new])[:, None] * self._features_at(new)
        self._sum_in(self._sx, -gone.sum(0), new.size, np.abs(gone).sum(0))
        self._x_gone[new] = True
        self.R[0].put(nodes, -self.Q[0, nodes])
        return self.push(nodes)

    def remove_nodes(self, nodes) -> np.ndarray:
        """Node removal = remove every incident edge (batch), then the node's features."""
        nodes = np.unique(np.asarray(nodes, dtype=np.int64))
        edges = self.incident_edges(nodes)
        changed = [self.remove_edges(edges)] if edges.shape[1] else []
        changed.append(self.remove_node_features(nodes))
        return np.unique(np.concatenate(changed))

    # -- outputs ------------------------------------------------------------------------------------
    def features(self, rows=None) -> np.ndarray:
        """The current features X (rows), recovered from the invariant: x = (q^(0) + r^(0)) / sqrt(d)."""
        if rows is None:
            out = self.Q[0].copy()
            for lo in range(0, self.n, 65536):
                r = np.arange(lo, min(lo + 65536, self.n))
                out[r] = (out[r] + self.R[0].get(r)) / np.sqrt(self.deg[r])[:, None].astype(self.dtype)
            return out
        rows = np.asarray(rows, dtype=np.int64)
        return (self.Q[0, rows] + self.R[0].get(rows)) / np.sqrt(self.deg[rows])[:, None].astype(self.dtype)

    def rows(self, ids, dtype=np.float64) -> np.ndarray:
        """Rows ``ids`` of the embedding Z_hat = sum_l w_l D^-1/2 Q[l]."""
        ids = np.asarray(ids, dtype=np.int64)
        out = np.zeros((ids.size, self.F), dtype=dtype)
        for lvl, w in enumerate(self.weights):
            if w:
                out += w * self.Q[lvl, ids]
        out /= np.sqrt(self.deg[ids])[:, None]
        return out

    def columns(self, cols, dtype=np.float64) -> np.ndarray:
        """Columns ``cols`` of the embedding for every node (n x len(cols))."""
        out = np.zeros((self.n, len(cols)), dtype=dtype)
        for lvl, w in enumerate(self.weights):
            if w:
                out += w * self.Q[lvl][:, cols]
        out /= np.sqrt(self.deg)[:, None]
        return out

    @property
    def Z(self) -> np.ndarray:
        """The whole embedding (n x F, the state's dtype); built on demand, so prefer ``rows``."""
        out = np.empty((self.n, self.F), dtype=self.dtype)
        for lo in range(0, self.n, 65536):
            out[lo:lo + 65536] = self.rows(np.arange(lo, min(lo + 65536, self.n)), self.dtype)
        return out

    def embedding(self) -> np.ndarray:
        return self.Z

    def exact_embedding(self, dtype=np.float64, columns=None) -> np.ndarray:
        """Z on the current graph and features by exact power iteration (r_max = 0), in ``dtype``
        (float64: the reference for error checks), optionally for some feature columns only."""
        x = self.features()
        if columns is not None:
            x = x[:, columns]
        return exact_propagation(self.adj, x.astype(dtype, copy=False), self.weights, self.deg)

    def residue_colsum(self, absolute: bool = False) -> np.ndarray:
        """1^T R with R = sum_l R^(l) (signed, as in the paper, or of |R| - conservative), in O(L F):
        the sums are maintained by every write."""
        out = np.zeros(self.F)
        for r in self.R:
            out += r.abssum if absolute else r.colsum
        return out

    def certificate_sums(self) -> tuple[np.ndarray, np.ndarray]:
        """(s_res, s_round) per column, in O(L F) from the sums every write maintains: with
        tau_t = sum_(l >= t) |w_l|, s_res = sum_t tau_t 1^T |R^(t)| over the tracked residues and s_round =
        tau_0 (the rounding bound + the float64 error of the tracked |R| sums), so that the embedding
        error summed over all nodes, sum_u |Z - Z_hat|(u, j), is at most s_res + s_round (docs/unlearning.md,
        *Theorem 1*)."""
        tail = np.cumsum(np.abs(self.weights)[::-1])[::-1]
        res = np.zeros(self.F)
        for t, r in enumerate(self.R):
            res += tail[t] * r.abssum
        return res, tail[0] * (self.rounding + sum(r.abs_error for r in self.R))

    def error_bound(self) -> float:
        """Lemma 3.1: per-column ||Z_hat - Z||_2 <= sqrt(n) L r_max."""
        return float(np.sqrt(self.n) * self.L * self.r_max)

    def residue_error_bound(self) -> float:
        """A tighter, data-dependent form of Lemma 3.1 from the residues actually held: by Eq. (1),
        z - z_hat = sum_l w_l sum_{t<=l} D^-1/2 (A D^-1)^(l-t) r^(t) = sum_l w_l sum_t A_hat^(l-t) D^-1/2 r^(t),
        and ||A_hat|| <= 1, so per column ||z - z_hat|| <= sum_t ||D^-1/2 r^(t)|| sum_{l>=t} |w_l|
        (<= sqrt(n) L r_max). Returns the largest column's value; costs O(stored residue rows)."""
        tail = np.cumsum(np.abs(self.weights)[::-1])[::-1]
        total = np.zeros(self.F)
        inv_deg = 1.0 / self.deg
        for t, r in enumerate(self.R):
            total += tail[t] * np.sqrt(r.weighted_sq_norms(inv_deg))
        return float(total.max()) if self.F else 0.0

    def invariant_error(self, x: np.ndarray | None = None) -> float:
        """Largest violation of Lemma 3.2 on the current graph, relative to the largest reserve
        (float rounding when the state is sound). ``x``: the features the state should hold (the
        level-0 equation is only checked against them, since the state recovers X from it).
        A full pass: for tests and checks."""
        scale = max(float(np.abs(self.Q).max()), 1e-300)
        q0 = self.Q[0].astype(np.float64)
        err = 0.0
        if x is not None:
            err = np.abs(q0 + self.R[0].dense() - np.sqrt(self.deg)[:, None] * np.asarray(x, np.float64)).max()
        prev = q0
        for lvl in range(1, self.L + 1):
            pushed = scaled_product(self.adj, prev, 1.0 / self.deg)
            cur = self.Q[lvl].astype(np.float64)
            res = self.R[lvl].dense() if lvl < self.L else 0.0
            err = max(err, float(np.abs(cur + res - pushed).max()))
            prev = cur
        return float(err) / scale

    def max_residue(self) -> float:
        return max((r.max_abs() for r in self.R), default=0.0)

    def stored_residue_rows(self) -> int:
        return sum(len(r) for r in self.R)

    def memory_bytes(self) -> int:
        """Bytes held by the state (reserves, residues, adjacency entries and index, degrees)."""
        a = self.adj
        return int(self.Q.nbytes + sum(r.nbytes for r in self.R) + a.data.nbytes + a.indices.nbytes
                   + a.indptr.nbytes + self.deg.nbytes + self._pos.nbytes + self._mark.nbytes)


class ExactPropagator(GraphState):
    """Same interface as GPRPropagator, but every change re-propagates exactly from scratch (what
    CGU, CEU and retraining pay); keeps X (as given: the dataset's values, never rounded again) and Z,
    no residues. Z is computed in float64 whatever ``dtype`` says: the certificate covers its rounding
    with a float64 term (``certificate_sums``), and a float32 Z's rounding would not fit the budget
    (docs/unlearning.md, *Theorem 2*)."""

    r_max = 0.0
    z_dtype = np.dtype(np.float64)

    def __init__(self, adj: sp.csr_matrix, x: np.ndarray, weights, dtype="float32"):
        self._own_adjacency(adj)
        self.dtype = _dtype(dtype)
        x = np.asarray(x)
        self.x = np.array(x, dtype=np.result_type(x.dtype, np.float32), copy=True)
        self.weights = np.asarray(weights, dtype=np.float64)
        self.L = self.weights.size - 1
        self.n, self.F = self.x.shape
        self._z = self._propagate()
        self.deferred = False    # True: changes only mark Z stale; it is recomputed when next read
        self._stale = False
        self._round_sums = None

    def _propagate(self) -> np.ndarray:
        return exact_propagation(self.adj, self.x, self.weights, self.deg, dtype=self.z_dtype)

    @property
    def Z(self) -> np.ndarray:
        if self._stale:
            self._z = None
            self._z = self._propagate()
            self._stale = False
            self._round_sums = None
        return self._z

    def certificate_sums(self) -> tuple[np.ndarray, np.ndarray]:
        """(0, s_round): no residues; s_round bounds sum_u |Z_computed - Z|(u, j) over all nodes by
        eta 1^T D^1/2 |X| (``propagation_rounding_factor``; 1^T A_hat^l |x| <= 1^T D^1/2 |x|). O(n F), once per
        re-propagation."""
        if self._round_sums is None or self._stale:
            eta = propagation_rounding_factor(self.weights, int(np.diff(self.adj.indptr).max(initial=1)),
                                              float(np.finfo(self.z_dtype).eps) / 2)
            mass = np.zeros(self.F)
            sq = np.sqrt(self.deg)
            for lo in range(0, self.n, 65536):
                mass += (sq[lo:lo + 65536, None] * np.abs(self.x[lo:lo + 65536].astype(np.float64))).sum(0)
            # the float64 sum above errs by gamma_(n + 2) of itself
            self._round_sums = eta * mass * (1 + gamma(self.n + 2, F64_UNIT))
        return np.zeros(self.F), self._round_sums

    def embedding(self) -> np.ndarray:
        return self.Z

    def rows(self, ids, dtype=np.float64) -> np.ndarray:
        return self.Z[np.asarray(ids, dtype=np.int64)].astype(dtype)

    def columns(self, cols, dtype=np.float64) -> np.ndarray:
        return self.Z[:, cols].astype(dtype)

    def features(self, rows=None) -> np.ndarray:
        return self.x if rows is None else self.x[np.asarray(rows, dtype=np.int64)]

    def _recompute(self) -> np.ndarray:
        self._stale = True
        if not self.deferred:
            self.Z
        return np.arange(self.n)

    def remove_edges(self, edges) -> np.ndarray:
        u, v = self._edge_pairs(edges)
        self._drop_edges(u, v, *self._check_edges(u, v))
        return self._recompute()

    def remove_node_features(self, nodes) -> np.ndarray:
        self.x[np.asarray(nodes, dtype=np.int64)] = 0.0
        return self._recompute()

    def remove_nodes(self, nodes) -> np.ndarray:
        nodes = np.unique(np.asarray(nodes, dtype=np.int64))
        e = self.incident_edges(nodes)
        if e.shape[1]:
            self._drop_edges(e[0], e[1], *self._check_edges(e[0], e[1]))
        self.x[nodes] = 0.0
        return self._recompute()

    def exact_embedding(self, dtype=np.float64, columns=None) -> np.ndarray:
        x = self.x if columns is None else self.x[:, columns]
        return exact_propagation(self.adj, x.astype(dtype, copy=False), self.weights, self.deg)

    def residue_colsum(self, absolute: bool = False) -> np.ndarray:
        return np.zeros(self.F)

    def rounding_bound(self) -> np.ndarray:
        """No residues, so no residue drift; the rounding of Z itself is not bounded here (see
        docs/unlearning.md, *float32 and the certificate*)."""
        return np.zeros(self.F)

    def implied_residue_colsum(self) -> np.ndarray:
        return np.zeros(self.F)

    def implied_residue_error(self) -> np.ndarray:
        return np.zeros(self.F)

    def repropagate(self, x=None, threshold: float = 0.0) -> None:
        """Already exact: recompute Z on the current graph (``x``: the current features, if given)."""
        if x is not None:
            self.x = np.array(x, dtype=self.x.dtype, copy=True)
        self._stale = True
        self.Z

    def error_bound(self) -> float:
        return 0.0

    def residue_error_bound(self) -> float:
        return 0.0

    def stored_residue_rows(self) -> int:
        return 0

    def memory_bytes(self) -> int:
        a = self.adj
        z = 0 if self._z is None else self._z.nbytes
        return int(self.x.nbytes + z + a.data.nbytes + a.indices.nbytes + a.indptr.nbytes + self.deg.nbytes)
