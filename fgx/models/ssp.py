"""FedSSP's spectral graph classifier (Tan et al., NeurIPS 2024; the SSP model of the authors' code, a
Specformer-style network), for the graph task, in PyG terms.

Per graph, the Laplacian L = D - A is eigendecomposed once (``spectral_cache``). Every eigenvalue is a
token: the eigenvalue encoder (``eig_encoder``: sine/cosine encoding of 100·λ, then a Linear layer, as
the code's ``SineEncoding``) embeds it, one transformer block (layer norm, multi-head attention over the
graph's eigenvalues, feed-forward) mixes the tokens, and a decoder gives ``heads`` new filter values per
eigenvalue. Each head h is a spectral filter U diag(f_h(λ)) U^T; its entry on every edge (i, j), with the
identity's, forms the edge's basis vector, which the filter encoder (``filter_encoder``: Linear, BN,
GELU, twice) maps to ``hidden`` channels, normalised by a softmax over each node's incoming edges.
``layers`` convolutions then sum the sources' (Linear + GELU) features weighted by those channels, with
a residual feed-forward block (Linear, BN, ReLU, twice). Nodes are mean-pooled per graph, a Linear layer
gives the representation ``rep``, and the head classifies ``rep + preference`` (FedSSP's personalised
preference vector, zero at start).

FedSSP (algorithm=fedssp_graph) shares the eigenvalue and filter encoders: the generic spectral
knowledge. ``forward`` keeps the last representations in ``last_rep`` for its preference regulariser.

Layer-wise contract: ``encode`` embeds the features and computes the edge bases (the edge state ``e``),
``layer`` is one convolution, ``activate`` the identity, ``head`` pooling, representation and classifier."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn

from fgx.config import spec
from fgx.models.base import LayerwiseModel, dropout
from fgx.registry import MODELS


@dataclass
class SSPParams:
    layers: int = field(default=2, metadata=spec(min=1, help="spectral convolutions"))
    hidden: int = field(default=64, metadata=spec(min=2, help="width of tokens, channels and representation"))
    heads: int = field(default=4, metadata=spec(min=1, help="attention heads = learned spectral filters (FedSSP: 4)"))
    dropout: float = field(default=0.1, metadata=spec(min=0.0, max=1.0, help="feature, transformer and basis dropout (FedSSP: 0.1)"))

    def validate(self, prefix: str) -> None:
        from fgx.config import ConfigError

        if self.hidden % 2 or self.hidden % self.heads:
            raise ConfigError(f"{prefix}.hidden", self.hidden, f"an even multiple of model.heads ({self.heads})")


def spectral_cache(view) -> dict:
    """Per view (its graphs, each on its own): eigenvalues of every graph's Laplacian as tokens, and for
    every edge (i, j) of a graph with n nodes the n products U[i, k] U[j, k], flattened. Computed once
    per client (torch.linalg.eigh on each graph's dense Laplacian; the graphs are small)."""
    from torch_geometric.utils import to_dense_adj

    G = int(view.graph_y.numel())
    counts = torch.bincount(view.graph, minlength=G)
    ptr = torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)])
    ei = view.edge_index.cpu()
    eg = view.graph.cpu()[ei[0]]
    evals, prod, prod_edge, prod_tok = [], [], [], []
    for g in range(G):
        lo, n = int(ptr[g]), int(counts[g])
        ids = (eg == g).nonzero().view(-1)
        sub = ei[:, ids] - lo
        A = to_dense_adj(sub, max_num_nodes=n)[0] if ids.numel() else torch.zeros(n, n)
        lam, U = torch.linalg.eigh(torch.diag(A.sum(1)) - A)
        evals.append(lam)
        if ids.numel():
            p = U[sub[0]] * U[sub[1]]                                   # [edges of g, n]
            prod.append(p.reshape(-1))
            prod_edge.append(ids.repeat_interleave(n))
            prod_tok.append((lo + torch.arange(n)).repeat(ids.numel()))
    cat = (lambda xs, dt: torch.cat(xs) if xs else torch.empty(0, dtype=dt))
    pos = torch.arange(int(counts.sum())) - ptr[:-1].repeat_interleave(counts)
    return {"eig": torch.cat(evals).float(), "prod": cat(prod, torch.float).float(), "prod_edge": cat(prod_edge, torch.long),
            "prod_tok": cat(prod_tok, torch.long), "tok_pos": pos, **size_buckets(counts, ptr)}


BUCKET_RATIO = 1.25     # a bucket's largest graph has at most 1.25x the nodes of its smallest (or 4 more)


def size_buckets(counts: torch.Tensor, ptr: torch.Tensor) -> dict:
    """Graphs grouped by size for the attention over each graph's eigenvalues: a graph's tokens are padded
    to the largest graph of its bucket, not of the client (Mutagenicity: 417 nodes against a mean of 30,
    and padding every graph to 417 made a local step ~40 s). ``bucket_tok``: token ids bucket by bucket
    (``bucket_ptr`` cuts it), ``tok_row``: each token's graph's row in its bucket; ``bucket_shape``:
    (graphs, padded length) per bucket."""
    order = torch.argsort(counts, stable=True)
    rows, shapes, tok_chunks, row_chunks = torch.zeros(len(counts), dtype=torch.long), [], [], []
    start = 0
    while start < len(order):
        n0 = int(counts[order[start]])
        end = start
        while end < len(order) and int(counts[order[end]]) <= max(BUCKET_RATIO * n0, n0 + 4):
            end += 1
        graphs = order[start:end]
        rows[graphs] = torch.arange(len(graphs))
        shapes.append((len(graphs), int(counts[graphs].max())))
        toks = torch.cat([torch.arange(int(ptr[g]), int(ptr[g + 1])) for g in graphs.tolist()])
        tok_chunks.append(toks)
        row_chunks.append(rows[graphs].repeat_interleave(counts[graphs]))
        start = end
    sizes = [len(t) for t in tok_chunks]
    return {"bucket_tok": torch.cat(tok_chunks) if tok_chunks else torch.empty(0, dtype=torch.long),
            "tok_row": torch.cat(row_chunks) if row_chunks else torch.empty(0, dtype=torch.long),
            "bucket_ptr": [0] + torch.tensor(sizes).cumsum(0).tolist() if sizes else [0],
            "bucket_shape": shapes}


class SineEncoding(nn.Module):
    """An eigenvalue λ as [λ, sin(100λ·w_i), cos(100λ·w_i)] (w_i = 10000^(-2i/d)), then Linear."""

    def __init__(self, hidden: int):
        super().__init__()
        self.hidden = hidden
        self.eig_w = nn.Linear(hidden + 1, hidden)

    def forward(self, e: torch.Tensor) -> torch.Tensor:
        div = torch.exp(torch.arange(0, self.hidden, 2, device=e.device) * (-math.log(10000) / self.hidden))
        pe = (e * 100)[:, None] * div
        return self.eig_w(torch.cat([e[:, None], torch.sin(pe), torch.cos(pe)], 1))


class SpectralConv(nn.Module):
    def __init__(self, hidden: int, p: float):
        super().__init__()
        self.pre_ffn = nn.Sequential(nn.Linear(hidden, hidden), nn.GELU())
        self.ffn = nn.Sequential(nn.Linear(hidden, hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.BatchNorm1d(hidden), nn.ReLU())
        self.p = p

    def forward(self, x: torch.Tensor, bases: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        msg = self.pre_ffn(x)[edge_index[0]] * bases
        y = torch.zeros_like(x).index_add_(0, edge_index[1], msg)
        x = x + dropout(y, self.p, self.training)
        return x + dropout(self.ffn(x), self.p, self.training)


class SSP(LayerwiseModel):
    def __init__(self, p: SSPParams, in_dim: int, out_dim: int):
        super().__init__()
        h = p.hidden
        self.atom = nn.Sequential(nn.Linear(in_dim, h), nn.ReLU())
        self.eig_encoder = SineEncoding(h)
        self.mha_norm, self.ffn_norm = nn.LayerNorm(h), nn.LayerNorm(h)
        self.mha = nn.MultiheadAttention(h, p.heads, p.dropout, batch_first=True)
        self.eig_ffn = nn.Sequential(nn.Linear(h, h), nn.GELU(), nn.Linear(h, h))
        self.decoder = nn.Linear(h, p.heads)
        self.filter_encoder = nn.Sequential(nn.Linear(p.heads + 1, h), nn.BatchNorm1d(h), nn.GELU(),
                                            nn.Linear(h, h), nn.BatchNorm1d(h), nn.GELU())
        self.convs = nn.ModuleList([SpectralConv(h, p.dropout) for _ in range(p.layers)])
        self.fc = nn.Linear(h, h)
        self.classifier = nn.Linear(h, out_dim)
        self.preference = nn.Parameter(torch.zeros(h))
        self.p, self.heads = p.dropout, p.heads
        self.last_rep: torch.Tensor | None = None

    @property
    def num_layers(self) -> int:
        return len(self.convs)

    def spectral_prefixes(self) -> list[str]:
        """The generic spectral knowledge FedSSP shares (the code's parameters named ``*encoder*``, not the atom encoder)."""
        return ["eig_encoder.", "filter_encoder."]

    def filters(self, c: dict) -> torch.Tensor:
        """[eigenvalues, heads]: the new filter value of every eigenvalue, per head (tokens attend within their
        graph: one attention call per bucket of graphs of similar size, padded to the bucket's largest)."""
        eig = self.eig_encoder(c["eig"])
        q = self.mha_norm(eig)
        att = torch.zeros_like(eig)
        for b, (rows, length) in enumerate(c["bucket_shape"]):
            toks = c["bucket_tok"][c["bucket_ptr"][b]:c["bucket_ptr"][b + 1]]
            at = (c["tok_row"][c["bucket_ptr"][b]:c["bucket_ptr"][b + 1]], c["tok_pos"][toks])
            pad = q.new_zeros(rows, length, q.size(1))
            pad[at] = q[toks]
            mask = torch.ones(rows, length, dtype=torch.bool, device=q.device)
            mask[at] = False
            out, _ = self.mha(pad, pad, pad, key_padding_mask=mask, need_weights=False)
            att = att.index_copy(0, toks, out[at])
        x = eig + dropout(att, self.p, self.training)
        x = x + dropout(self.eig_ffn(self.ffn_norm(x)), self.p, self.training)
        return self.decoder(x)

    def edge_bases(self, view) -> torch.Tensor:
        from torch_geometric.utils import softmax

        c = view.spectral
        new_e = self.filters(c)
        E = view.edge_index.size(1)
        spec_ = torch.zeros(E, self.heads, device=new_e.device).index_add_(
            0, c["prod_edge"], c["prod"][:, None] * new_e[c["prod_tok"]])        # (U diag(f_h) U^T)_{ij} per edge
        ident = (view.edge_index[0] == view.edge_index[1]).float()[:, None]    # the identity basis
        b = dropout(self.filter_encoder(torch.cat([ident, spec_], 1)), self.p, self.training)
        return softmax(b, view.edge_index[1], num_nodes=view.num_nodes)      # over each node's in-edges

    def encode(self, view) -> dict:
        return {"h": self.atom(view.x), "e": self.edge_bases(view)}

    def layer(self, i: int, h: torch.Tensor, e, edge_index: torch.Tensor):
        return self.convs[i](h, e, edge_index), e

    def activate(self, i: int, pre: torch.Tensor) -> torch.Tensor:
        return pre

    def head(self, h: torch.Tensor, e, edge_index: torch.Tensor, view) -> torch.Tensor:
        from torch_geometric.nn import global_mean_pool

        rep = self.fc(global_mean_pool(h, view.graph, size=int(view.graph_y.numel())))
        self.last_rep = rep
        return self.classifier(rep + self.preference)


@MODELS.register("ssp", params=SSPParams, tasks=("graph",))
def build_ssp(p: SSPParams, in_dim: int, out_dim: int, info) -> SSP:
    return SSP(p, in_dim, out_dim)
