"""Sparse matrices built once per tensor, and the products fgx's GCN and GraphSAGE layers compute with them.

A client's graph and its raw features are the same tensors at every step and every evaluation, so
the normalised adjacency (as CSR, with its transpose for the backward pass) and a CSR copy of sparse
input features are built on first use and kept while the tensor lives (``per_tensor``). Why by hand:
``torch.sparse.mm``'s backward transposes the sparse matrix at every call, PyG's GCNConv (cached=False)
normalises the graph at every call, and on a Cora client both cost more than the products themselves
(issue #26's profile)."""
from __future__ import annotations

import warnings
import weakref

import torch

# (kind, id, version, extra) of a tensor -> (weak reference to it, value); an entry goes with its tensor
_CACHE: dict[tuple, tuple] = {}

# input features at most this dense are multiplied as CSR (bag-of-words features: Cora 1.3 %, CiteSeer
# 0.9 %); denser ones as they are (at ~5 % a 270 x 1433 CSR product costs about what the dense one does)
SPARSE_INPUT_DENSITY = 0.05


def per_tensor(t: torch.Tensor, kind: str, build, *extra):
    """``build()``, computed once per (tensor, in-place version, ``extra``) and kept while ``t`` lives."""
    key = (kind, id(t), t._version, *extra)
    hit = _CACHE.get(key)
    if hit is not None and hit[0]() is t:
        return hit[1]
    value = build()
    for k in [k for k in list(_CACHE) if k[:2] == key[:2]]:   # an older version of the same tensor
        del _CACHE[k]
    _CACHE[key] = (weakref.ref(t), value)
    weakref.finalize(t, _CACHE.pop, key, None)
    return value


def _csr_pair(index: torch.Tensor, values: torch.Tensor, shape: tuple[int, int]):
    with warnings.catch_warnings():      # "sparse CSR support is in beta": its product with a dense matrix is not
        warnings.simplefilter("ignore", UserWarning)
        coo = torch.sparse_coo_tensor(index, values, shape)
        a, a_t = coo.to_sparse_csr(), coo.t().to_sparse_csr()
    # an undirected graph's Â = D^-1/2 (A + I) D^-1/2 is its own transpose, entry for entry: one CSR kept
    # for both halves the adjacency's memory (issue 69) and gives the same products
    return (a, a) if same_csr(a, a_t) else (a, a_t)


def same_csr(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Two CSR matrices with the same shape, structure and values, bit for bit."""
    return a.shape == b.shape and all(torch.equal(u, v) for u, v in zip(
        (a.crow_indices(), a.col_indices(), a.values()), (b.crow_indices(), b.col_indices(), b.values())))


def gcn_adjacency(edge_index: torch.Tensor, num_nodes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(Â, Âᵀ) as CSR, Â = D^-1/2 (A + I) D^-1/2 from PyG's ``gcn_norm`` (row = target node: messages go
    from edge_index[0] to edge_index[1], as in GCNConv)."""
    def build():
        from torch_geometric.nn.conv.gcn_conv import gcn_norm

        ei, w = gcn_norm(edge_index, None, num_nodes, add_self_loops=True)
        return _csr_pair(ei.flip(0), w, (num_nodes, num_nodes))
    return per_tensor(edge_index, "gcn_adjacency", build, num_nodes)


def mean_adjacency(edge_index: torch.Tensor, num_nodes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(M, Mᵀ) as CSR, M = D_in^-1 A (row = target node): M h is the mean over each node's in-neighbours
    (zero for a node without any), what SAGEConv's mean aggregation computes."""
    def build():
        from torch_geometric.utils import degree

        src, dst = edge_index
        deg = degree(dst, num_nodes)
        return _csr_pair(torch.stack([dst, src]), 1.0 / deg[dst], (num_nodes, num_nodes))
    return per_tensor(edge_index, "mean_adjacency", build, num_nodes)


def sparse_input(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(X, Xᵀ) as CSR when ``x`` is a 2-d input at most SPARSE_INPUT_DENSITY dense, else None."""
    if x.dim() != 2 or x.requires_grad or x.numel() == 0:
        return None

    def build():
        # counted before the indices are listed: a dense x's index list is 16 bytes per entry (1 GB for a
        # million nodes of 64 features), only to be thrown away
        if int(torch.count_nonzero(x)) > SPARSE_INPUT_DENSITY * x.numel():
            return None
        idx = x.nonzero().t()
        return _csr_pair(idx, x[idx[0], idx[1]], tuple(x.shape))
    return per_tensor(x, "sparse_input", build)


class _SparseTimesDense(torch.autograd.Function):
    """a @ b for a sparse ``a`` that needs no gradient; the gradient w.r.t. b is a_t @ grad."""

    @staticmethod
    def forward(ctx, a, a_t, b):
        ctx.a, ctx.a_t = a, a_t
        return a @ b

    @staticmethod
    def backward(ctx, grad):
        return None, None, _SparseTimesDense.apply(ctx.a_t, ctx.a, grad)


def propagate(adj: tuple[torch.Tensor, torch.Tensor], h: torch.Tensor) -> torch.Tensor:
    """Â h with (Â, Âᵀ) from ``gcn_adjacency`` (cast to h's device and dtype when they differ)."""
    a, a_t = adj
    if a.dtype != h.dtype or a.device != h.device:
        a, a_t = a.to(h.device, h.dtype), a_t.to(h.device, h.dtype)
    return _SparseTimesDense.apply(a, a_t, h)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``nn.functional.linear(x, weight, bias)``, with a sparse enough constant ``x`` multiplied as CSR."""
    sp = sparse_input(x) if x.device.type == "cpu" or x.device.type == "cuda" else None
    if sp is None or sp[0].dtype != weight.dtype:
        return torch.nn.functional.linear(x, weight, bias)
    out = _SparseTimesDense.apply(sp[0], sp[1], weight.t().contiguous())
    return out + bias if bias is not None else out
