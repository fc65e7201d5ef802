"""Layer-wise inference: every node's embedding computed once per layer, for all of a client's nodes,
then the requested items scored (PyG's ``inference`` examples do the same for GraphSAGE).

Sampled evaluation (fgx.sampler, ``score_items``) recomputes the neighbourhoods that batches share,
batch after batch: at AML scale a complete evaluation took minutes per bank. Here one layer costs one
pass over its edges. The pass runs in chunks of destination nodes, each with all of its in-edges
(about ``chunk_edges`` of them; a node with more is a chunk of its own), so a layer's per-edge messages
never exist for the whole graph at once. That is exact for models whose node output depends only on its
own row and its in-edges (``chunkable``: GINe/PNA without reverse message passing, GraphSAGE, GIN); the
others (GCN, whose normalisation reads the source's degree, and reverse message passing) run each layer
on the whole graph in one piece. Edge models then update the edge features in chunks of edges.

Which edges a layer aggregates (``layer_edges``): with the algorithm's sampler fanouts, layer i of L
aggregates at most ``fanouts[L-1-i]`` in-edges per node, one uniform draw per node and evaluation (the
neighbourhood sizes training saw: a sum aggregator trained on 10 neighbours is not fed a hub's 10,000);
fanouts -1 (or none) aggregate every in-edge. Edge models with ego IDs mark the endpoints of the scored
edges (``view.seed_edge_mask``). With every in-edge, the scores are exactly those of the sampled path
with fanouts -1 and every scored edge in one batch (tests/test_inference.py); with fanouts they differ
from a sampled evaluation as two neighbour samples differ, and in the ego marks of the other scored
edges (a sampled batch marks only its own seeds' endpoints): docs/performance.md measures the difference."""
from __future__ import annotations

import copy

import torch


def chunkable(model) -> bool:
    """A node's layer output depends only on its own row and its in-edges (see module docstring)."""
    model = getattr(model, "inner", model)
    return bool(getattr(model, "trim_exact", False) or getattr(model, "in_edge_local", False))


def supports(model) -> bool:
    """The model exposes the layer-wise interface (fgx.models.base.LayerwiseModel)."""
    return all(callable(getattr(model, k, None)) for k in ("encode", "layer", "activate", "head")) and \
        hasattr(model, "num_layers")


class Chunks:
    """Destination-node chunks of one edge_index: edges sorted by destination, cut at node boundaries
    so that a chunk holds about ``chunk_edges`` in-edges (None: one chunk, the whole graph)."""

    def __init__(self, edge_index: torch.Tensor, num_nodes: int, chunk_edges: int | None):
        dst = edge_index[1]
        if chunk_edges is None or dst.numel() <= chunk_edges:
            self.bounds, self.order = [(0, num_nodes, 0, dst.numel())], None
            return
        self.order = torch.argsort(dst, stable=True)
        rowptr = torch.zeros(num_nodes + 1, dtype=torch.long, device=dst.device)
        rowptr[1:] = torch.cumsum(torch.bincount(dst, minlength=num_nodes), 0)
        cuts = torch.searchsorted(rowptr, torch.arange(chunk_edges, dst.numel(), chunk_edges, device=dst.device))
        nodes = torch.unique(torch.cat([torch.tensor([0, num_nodes], device=dst.device), cuts.clamp(max=num_nodes)]))
        ptr = rowptr[nodes].tolist()
        nodes = nodes.tolist()
        self.bounds = [(nodes[k], nodes[k + 1], ptr[k], ptr[k + 1]) for k in range(len(nodes) - 1)
                       if nodes[k + 1] > nodes[k]]


def layer_edges(sampler, fanouts: list[int] | None, num_layers: int, seed: int) -> list:
    """Per layer, the ids of the edges it aggregates (None: all): ``fanouts[L-1-i]`` in-edges per node
    for layer i, drawn by ``sampler.in_edges`` with one generator per evaluation."""
    if not fanouts or sampler is None or all(k < 0 for k in fanouts):
        return [None] * num_layers
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(num_layers):
        k = fanouts[min(num_layers - 1 - i, len(fanouts) - 1)]
        out.append(None if k < 0 else sampler.in_edges(k, g))
    return out


def run_layer(model, i: int, h: torch.Tensor, e: torch.Tensor | None, edge_index: torch.Tensor,
              chunk_edges: int | None, keep: torch.Tensor | None = None, update: torch.Tensor | None = None):
    """Layer ``i`` of ``model`` over the whole graph, in chunks: (new node rows, edge features). Nodes
    aggregate the edges ``keep`` (None: all); the features of the edges ``update`` (None: all) are
    updated, the others kept (edge models; in place when no gradient is recorded)."""
    if keep is not None:
        keep = keep.to(edge_index.device)     # the sampler draws its ids on the CPU; the view may be on a GPU
    if update is not None:
        update = update.to(edge_index.device)
    ei_all = edge_index if keep is None else edge_index[:, keep]
    whole = not chunkable(model) or chunk_edges is None
    chunks = Chunks(ei_all, h.size(0), None if whole else chunk_edges)
    model = getattr(model, "inner", model)    # a wrapper (fgx.algorithms.halo) runs its inner model's layers
    split = hasattr(model, "layer_nodes")

    def edge_rows(pos):                      # features of the aggregated edges at positions ``pos``
        if e is None:
            return None
        if keep is None:
            return e if pos is None else e[pos]
        return e[keep] if pos is None else e[keep[pos]]

    from fgx.progress import tick

    label = f"layer-wise evaluation, layer {i + 1}"
    n_edge_chunks = 0 if not split or e is None else \
        -(-(edge_index.size(1) if update is None else update.numel()) // (chunk_edges or 1 << 62))
    n_chunks = len(chunks.bounds) + n_edge_chunks
    tick(label, 0, n_chunks)
    if len(chunks.bounds) == 1:
        es = edge_rows(None)
        pre = model.layer_nodes(i, h, es, ei_all) if split else model.layer(i, h, es, ei_all)[0]
    else:
        parts = []
        local = torch.empty(h.size(0), dtype=torch.long, device=h.device)
        for c, (lo, hi, a, b) in enumerate(chunks.bounds):
            tick(label, c, n_chunks)
            pos = chunks.order[a:b]
            src, dst = ei_all[0, pos], ei_all[1, pos]
            # the chunk's rows first, then its sources outside it, renumbered by one lookup table
            rows = torch.cat([torch.arange(lo, hi, device=h.device), torch.unique(src[(src < lo) | (src >= hi)])])
            local[rows] = torch.arange(rows.numel(), device=h.device)
            ei = torch.stack([local[src], local[dst]])
            es = edge_rows(pos)
            sub = model.layer_nodes(i, h[rows], es, ei) if split else model.layer(i, h[rows], es, ei)[0]
            parts.append(sub[: hi - lo])
        pre = torch.cat(parts)
    if not split or e is None:
        return pre, e
    if torch.is_grad_enabled():
        e = e.clone()
    total = edge_index.size(1) if update is None else update.numel()
    step = max(1, total if chunk_edges is None else chunk_edges)
    for c, a in enumerate(range(0, total, step)):
        tick(label, len(chunks.bounds) + c, n_chunks)
        sel = torch.arange(a, min(a + step, total), device=e.device) if update is None else update[a:a + step]
        e[sel] = model.layer_edges(i, pre, e[sel], edge_index[:, sel])
    return pre, e


def edges_to_update(keeps: list, i: int, scored: torch.Tensor | None) -> torch.Tensor | None:
    """The edges whose features layer ``i``'s update must produce: those the next layer aggregates and
    the scored ones (the readout's); after the last layer, the scored ones only (None: all)."""
    if scored is None:
        return None
    nxt = keeps[i + 1] if i + 1 < len(keeps) else scored
    if nxt is None:
        return None
    return torch.unique(torch.cat([nxt.to(scored.device), scored]))


def scored_view(view, task: str, ids: torch.Tensor):
    """A shallow copy of ``view`` whose ``seed_edge_mask`` marks the scored edges (ego IDs)."""
    if task != "edge":
        return view
    v = copy.copy(view)
    m = torch.zeros(view.edge_index.size(1), dtype=torch.bool, device=view.edge_index.device)
    m[ids] = True
    v.seed_edge_mask = m
    return v


def forward(model, view, task: str, ids: torch.Tensor, chunk_edges: int | None, keeps: list | None = None) -> torch.Tensor:
    """Scores of the items ``ids`` (edges or nodes of ``view``), in that order, each layer computed once;
    ``keeps``: per layer, the edges it aggregates (``layer_edges``; None: all)."""
    view = scored_view(view, task, ids)
    s = model.encode(view)
    h, e = s["h"], s["e"]
    ei = view.edge_index
    L = model.num_layers
    keeps = keeps or [None] * L
    scored = ids if task == "edge" else None
    for i in range(L):
        pre, e = run_layer(model, i, h, e, ei, chunk_edges, keep=keeps[i],
                           update=edges_to_update(keeps, i, scored))
        h = model.activate(i, pre)
    if task == "edge":
        return model.head(h, e[ids], ei[:, ids], view)
    return model.head(h, e, ei, view)[ids]


def use_layerwise(ctx, model, subset: int | None) -> bool:
    """``eval.inference``: auto takes the layer-wise path for complete evaluations (no ``subset``) of a
    model that supports it; ``layerwise`` / ``sampled`` force one path (layerwise still needs the model)."""
    mode = ctx.config.top.eval.inference if ctx.config is not None else "auto"
    if mode == "sampled" or not supports(model):
        return False
    return mode == "layerwise" or subset is None


def chunk_edges(ctx) -> int:
    return ctx.config.top.eval.chunk_edges if ctx.config is not None else 1 << 20
