"""CE-FedGNN's local rounds of many clients as one computation per step (``executor=batched``).

With 1,000 clients a round was 8,000 small sampled steps one after another (issue 69's profile at 100k
nodes: 99 % of the round in ``local_round``, under 1 % in the embedding exchange), so each client's
step cost torch's per-call overhead rather than arithmetic. Here every step of a group of clients is
one graph: each client still samples its own subgraph with its own generator (fgx.sampler), and the
samples are stacked as a block-diagonal union (client c's rows follow client c-1's). Every operation
that is row-wise (dropout masks, the moving averages of Eq. 5, ReLU, the halo rows, the normalised
adjacency and its sparse product, cross-entropy) runs once over the union; every operation that
reduces over a client's rows or uses its own weights (``h W_c``, ``+ b_c``, the classifier, the loss
sum) runs per client on its own contiguous piece with the same kernel and shape as its own loop, so
each client's forward, gradients, estimators G (Eq. 9) and weights equal ``ce_fedgnn.local_round``'s
bit for bit (tests/test_ce_fedgnn_batched.py). Dropout draws from each client's own generator seeded
as executor=local seeds its global one, in the order its loop draws.

Messages are untouched: each client's update, G and boundary embeddings still leave through
``ce_fedgnn._upload`` and go up the channel one client at a time."""
from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import nn

from fgx.models import sparse
from fgx.progress import tick
from fgx.tasks import targets


def refusal(clients: list, p) -> str | None:
    """Why these clients' local rounds cannot run batched (None: they can)."""
    from fgx.models.gcn import GCN

    if not (p.fanouts and p.batch_size is not None):
        return "whole-graph steps (algorithm.fanouts or batch_size null)"
    if p.positive_share is not None:
        return "class-stratified batches (algorithm.positive_share)"
    if p.local_optimizer != "ema_sgd":
        return f"local_optimizer={p.local_optimizer} (only ema_sgd: W <- W - lr * G)"
    for c in clients:
        m = c.model
        if type(m) is not GCN or c.task != "node" or m.input_dropout:
            return f"client {c.cid}'s model is a {type(m).__name__} on the {c.task} task (GCN node models only)"
        if c.loss_weight is not None or c.item_weight is not None:
            return "class- or item-weighted losses"
        if c.view.y.dim() != 1:
            return "labels that are not one class per node"
    return None


class _Dropout:
    """fgx.models.base.dropout of each client's piece with uniforms from the client's own generator."""

    def __init__(self, rate: float, seeds: list[int]):
        self.rate = rate
        self.gens = [torch.Generator().manual_seed(s) for s in seeds]

    def __call__(self, h: torch.Tensor, rows: list[int]) -> torch.Tensor:
        p = self.rate
        if p == 0.0:
            return h
        if p >= 1.0:
            return h * 0.0
        u = torch.empty(h.shape, dtype=h.dtype)
        for g, piece in zip(self.gens, u.split(rows)):
            torch.rand(piece.shape, generator=g, dtype=h.dtype, out=piece)
        return h * (u.to(h.device) >= p) * (1.0 / (1.0 - p))


class _Union:
    """One step's samples of a group of clients stacked block-diagonally: client c's sampled rows follow
    client c-1's, its owned and halo nodes index the group's stacked estimators and halo embeddings."""

    def __init__(self, cs: list, samples: list, st: _Stacked, L: int, raw_layer0: bool):
        dev = st.dev
        self.rows = [s.nodes.numel() for s in samples]
        self.seed_rows = [s.num_seed_nodes for s in samples]
        self.n = sum(self.rows)
        rows = torch.tensor(self.rows, device=dev)
        who = torch.repeat_interleave(torch.arange(len(cs), device=dev), rows)       # client of each row
        base = torch.cumsum(rows, 0) - rows
        nodes = torch.cat([s.nodes for s in samples]).to(dev)
        owned = nodes < st.n_own[who]
        self.own_pos, self.halo_pos = owned.nonzero().view(-1), (~owned).nonzero().view(-1)
        self.own_ids = nodes[self.own_pos] + st.own_off[who[self.own_pos]]
        self.halo_ids = nodes[self.halo_pos] - st.n_own[who[self.halo_pos]] + st.halo_off[who[self.halo_pos]]
        self.x = torch.cat([c.view.x[s.nodes.to(dev)] for c, s in zip(cs, samples)])
        if not raw_layer0 and self.halo_pos.numel():
            self.x[self.halo_pos] = 0
        n_edges = torch.tensor([s.edge_index.size(1) for s in samples], device=dev)
        ei = torch.cat([s.edge_index for s in samples], 1).to(dev) + torch.repeat_interleave(base, n_edges)
        self.edges_all = ei
        self.edges_internal = ei[:, owned[ei[0]] & owned[ei[1]]]
        hop = torch.cat([s.hop for s in samples]).to(dev)[self.own_pos]
        self.upd = [hop <= L - 1 - i for i in range(L)]
        seed_rows = torch.tensor(self.seed_rows, device=dev)
        first = torch.repeat_interleave(base, seed_rows)
        self.seeds = first + torch.arange(first.numel(), device=dev) - torch.repeat_interleave(
            torch.cumsum(seed_rows, 0) - seed_rows, seed_rows)
        self.y = torch.cat([c.view.y[s.nodes[:s.num_seed_nodes].to(dev)] for c, s in zip(cs, samples)])


class _Stacked:
    """A group's per-client sizes and offsets into its stacked owned and halo nodes."""

    def __init__(self, cs: list, dev):
        self.dev = dev
        self.n_own = torch.tensor([c.n_own for c in cs], device=dev)
        n_halo = torch.tensor([c.halo_global.numel() for c in cs], device=dev)
        self.own_off = torch.cumsum(self.n_own, 0) - self.n_own
        self.halo_off = torch.cumsum(n_halo, 0) - n_halo
        self.own_bounds = [0] + torch.cumsum(self.n_own, 0).tolist()


class Loop(NamedTuple):
    """The per-client loop's pieces the grouped steps reuse. ce_fedgnn passes them (it imports this module,
    so this module importing it back would make an import circle)."""
    local_round: Callable     # ce_fedgnn.local_round
    upload: Callable          # ce_fedgnn._upload
    ma_rows: Callable         # ce_fedgnn.ma_rows (Eq. 5's rows)


def local_rounds(clients: list, p, global_state: dict, global_G: dict | None, rseed: int, share: list,
                 first_round: bool, seeds: list[int], group_nodes: int, loop: Loop) -> list:
    """``ce_fedgnn.local_round`` of every client (``seeds``: executor=local's seed of each), in order, in
    groups of consecutive clients with at most ``group_nodes`` owned nodes (one larger client: a group of
    its own). A group's union stays small enough to keep its activations in cache; one huge union is
    slower than the loop (memory-bound elementwise passes)."""
    out: list = [None] * len(clients)
    active = []
    for i, c in enumerate(clients):
        if targets(c.view, c.task, "train")[0].any():
            active.append(i)
        else:                                 # nothing to train: its loop returns at once, drawing nothing
            out[i] = loop.local_round(c, p, global_state, global_G, rseed, share, first_round)
    groups, size = [], group_nodes + 1
    for i in active:
        if size + clients[i].n_own > group_nodes:
            groups.append([])
            size = 0
        groups[-1].append(i)
        size += clients[i].n_own
    for g in groups:
        for i, res in zip(g, _group_round([clients[i] for i in g], p, global_state, global_G, rseed, share,
                                          first_round, [seeds[i] for i in g], loop)):
            out[i] = res
    return out


def _group_round(cs: list, p, global_state: dict, global_G: dict | None, rseed: int, share: list,
                 first_round: bool, seeds: list[int], loop: Loop) -> list:
    model0 = cs[0].model
    L, dev = model0.num_layers, cs[0].view.x.device
    gens, train_ids = [], []
    for c in cs:
        c.model.load_state_dict(global_state)
        for k, v in (global_G or {}).items():
            c.G[k] = v.clone()
        c.updated = [torch.zeros(c.n_own, dtype=torch.bool, device=dev) for _ in range(L)]
        c.model.train()
        gens.append(torch.Generator().manual_seed(rseed + c.cid))
        train_ids.append(targets(c.view, c.task, "train")[0].nonzero().view(-1))
    names = [n for n, _ in model0.named_parameters()]
    params = [dict(c.model.named_parameters()) for c in cs]
    flat_params = [ps[n] for ps in params for n in names]
    st = _Stacked(cs, dev)
    dims = [int(model0.convs[i].lin.weight.size(0)) for i in range(L)]
    hbar, init = _stack_estimators(cs, dims, dev)
    updated = [torch.cat([c.updated[i] for c in cs]) for i in range(L)]
    remote = {layer: torch.cat([c.remote[layer] if layer in c.remote else
                                torch.zeros(c.halo_global.numel(), dims[layer - 1], device=dev) for c in cs])
              for layer in range(1, L + 1) if p.embedding_sharing != "none" and any(layer in c.remote for c in cs)}
    drop = _Dropout(model0.dropout, seeds)
    losses = [[] for _ in cs]
    for step in range(p.local_steps):
        tick(f"clients {cs[0].cid}-{cs[-1].cid} step", step + 1, p.local_steps)
        samples = []
        for c, g, ids in zip(cs, gens, train_ids):
            if p.batch_size < ids.numel():
                items = ids[torch.randperm(ids.numel(), generator=g)[:p.batch_size].to(ids.device)]
            else:
                items = ids
            samples.append(c.sampler.sample_nodes(items.cpu(), g))
        u = _Union(cs, samples, st, L, p.remote_layer0 == "raw")
        h = u.x
        for i in range(L):
            edges = u.edges_all if cs[0].layer_uses_cross[i] else u.edges_internal
            if i > 0:
                h = drop(h, u.rows)
            # GCN.layer: Â (h W_c) + b_c, h W_c and + b_c on each client's own rows
            lin = sparse.linear if i == 0 else nn.functional.linear
            w = f"convs.{i}.lin.weight"
            hw = torch.cat([lin(piece, ps[w]) for piece, ps in zip(h.split(u.rows), params)])
            out = sparse.propagate(sparse.gcn_adjacency(edges, u.n), hw)
            b = f"convs.{i}.bias"
            if b in params[0]:
                out = torch.cat([piece + ps[b] for piece, ps in zip(out.split(u.rows), params)])
            used = _moving_average(p, loop, hbar, init, updated, i, out[u.own_pos], u.upd[i], u.own_ids)
            h_own = model0.activate(i, used)
            layer = i + 1
            if layer in remote:
                halo = remote[layer][u.halo_ids]
            else:
                halo = torch.zeros(u.halo_ids.numel(), *h_own.shape[1:], dtype=h_own.dtype, device=dev)
            h = torch.zeros(u.n, *h_own.shape[1:], dtype=h_own.dtype, device=dev)
            h = h.index_put((u.own_pos,), h_own).index_put((u.halo_pos,), halo)
        if model0.classifier is not None:
            h = drop(h, u.rows)
            h = torch.cat([nn.functional.linear(piece, ps["classifier.weight"], ps["classifier.bias"])
                           for piece, ps in zip(h.split(u.rows), params)])
        per = nn.functional.cross_entropy(h[u.seeds], u.y, reduction="none")
        step_losses = [s.sum() / torch.ones_like(s).sum().clamp(min=1e-12) for s in per.split(u.seed_rows)]
        for w in flat_params:
            w.grad = None
        torch.stack(step_losses).sum().backward()
        _estimator_step(p, cs, names, params, step == 0 and first_round)
        for k, v in enumerate(torch.stack(step_losses).detach().tolist()):
            losses[k].append(v)
    for k, c in enumerate(cs):
        a, b = st.own_bounds[k], st.own_bounds[k + 1]
        c.hbar = [hb[a:b].clone() for hb in hbar]
        c.hbar_init = [m[a:b].clone() for m in init]
        c.updated = [m[a:b].clone() for m in updated]
    return [loop.upload(c, global_state, share) + (sum(ls) / len(ls),) for c, ls in zip(cs, losses)]


def _stack_estimators(cs: list, dims: list[int], dev) -> tuple[list, list]:
    """The clients' moving averages (Eq. 5) and their 'has a value' masks, stacked per layer."""
    hbar, init = [], []
    for i, d in enumerate(dims):
        hbar.append(torch.cat([c.hbar[i] if c.hbar[i] is not None else torch.zeros(c.n_own, d, device=dev)
                               for c in cs]))
        init.append(torch.cat([c.hbar_init[i] if c.hbar_init[i] is not None else
                               torch.zeros(c.n_own, dtype=torch.bool, device=dev) for c in cs]))
    return hbar, init


def _moving_average(p, loop: Loop, hbar: list, init: list, updated: list, i: int, fresh: torch.Tensor,
                    upd: torch.Tensor,
                    ids: torch.Tensor) -> torch.Tensor:
    """ce_fedgnn._ma over the union (ce_fedgnn.ma_rows on rows ``ids`` of the stacked estimators). In
    place: ``hbar[i][ids]`` is a copy (advanced indexing), so no step's autograd graph holds ``hbar[i]``."""
    new, used = loop.ma_rows(p, fresh, hbar[i][ids], init[i][ids], upd)
    hbar[i][ids] = new
    init[i][ids[upd]] = True
    updated[i][ids[upd]] = True
    return used


def _estimator_step(p, cs: list, names: list[str], params: list[dict], first: bool) -> None:
    """Eq. 9 and W <- W - lr * G for every client, the loop's per-parameter formulas (torch._foreach_*
    runs the same elementwise kernel per tensor, without a Python call per client and parameter)."""
    ws = [ps[n] for ps in params for n in names]
    grads = [w.grad if w.grad is not None else torch.zeros_like(w) for w in ws]
    if p.weight_decay:
        grads = torch._foreach_add(grads, torch._foreach_mul([w.detach() for w in ws], p.weight_decay))
    keys = [(c, n) for c in cs for n in names]
    if p.grad_init == "first" and first:
        G = [g.detach().clone() for g in grads]
    else:
        G = torch._foreach_add(torch._foreach_mul([c.G[n] for c, n in keys], 1 - p.beta),
                               torch._foreach_mul([g.detach() for g in grads], p.beta))
    for (c, n), g in zip(keys, G):
        c.G[n] = g
    with torch.no_grad():
        torch._foreach_sub_(ws, torch._foreach_mul(G, p.lr))
