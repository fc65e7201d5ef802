"""CE-FedGNN (Guo et al., 2026): cross-client embedding exchange with moving-average estimators.

Per client, per node and per layer, a moving average of pre-activations (Eq. 5) replaces the
fresh value; the gradient is a moving average too (Eq. 9); the local step is W <- W - lr * G.
At the end of a round each client uploads its model update, its gradient estimator G and the
embeddings of the boundary nodes it updated; the server averages W and G, broadcasts both and
routes each embedding to the clients that hold an edge to that node. A remote node's embedding is
a constant (no gradient flows into it) and its neighbourhood is never expanded (one hop).

Switches (spec ce_fedgnn.md §2.5): ``embedding_sharing: moving_average | stale | none`` and
``beta`` (1.0 = no gradient moving average). ``fedgnn_st`` and the Table 5 ablations are presets."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from fgx import inference
from fgx.algorithms.base import Algorithm, add_delta, aggregation_weights, flat_params, mean_loss, weighted_average
from fgx.config import ConfigError, spec
from fgx.federation.channel import Message
from fgx.federation.client import check_positive_share, round_seed, state_delta
from fgx.federation.stratified import stratified_batches
from fgx.progress import tick
from fgx.registry import ALGORITHMS
from fgx.tasks import SPLITS, class_weights, local_view, targets


@dataclass
class CEFedGNNParams:
    lr: float = field(default=0.01, metadata=spec(gt=0.0))
    local_optimizer: str = field(default="ema_sgd", metadata=spec(
        choices=["ema_sgd", "adam_on_g"], help="ema_sgd: W -= lr*G (paper); adam_on_g: Adam step with G as gradient"))
    weight_decay: float = field(default=0.0, metadata=spec(min=0.0))
    local_steps: int = field(default=8, metadata=spec(min=1, help="K: local steps per round"))
    batch_size: int | None = field(default=512, metadata=spec(min=1, help="seed items per step; null: all"))
    gamma: float = field(default=0.5, metadata=spec(gt=0.0, max=1.0, help="embedding moving average (Eq. 5)"))
    beta: float = field(default=0.9, metadata=spec(gt=0.0, max=1.0, help="gradient moving average (Eq. 9)"))
    embedding_sharing: str = field(default="moving_average", metadata=spec(
        choices=["moving_average", "stale", "none"]))
    share_grad_estimator: bool = field(default=True, metadata=spec(
        help="Algorithm 1: clients upload G, the server averages and broadcasts it; false: only W crosses "
             "(each client keeps its own G; with beta = 1 this is plain FedAvg with SGD steps)"))
    share_layers: list[int] | None = field(default=None, metadata=spec(
        min=0, help="1-based layers whose boundary embeddings are shared; null: those the task needs"))
    remote_layer0: str = field(default="auto", metadata=spec(
        choices=["auto", "drop", "zeros", "raw"],
        help="a remote neighbour's layer-0 input (raw needs public features; auto: raw where the dataset "
             "declares its node features public, else drop)"))
    fanouts: list[int] | None = field(default_factory=lambda: [10, 10], metadata=spec(
        help="per-hop fanouts of fgx's neighbour sampler (paper: [10, 10] citation, [100, 100] AML); "
             "null: each step runs on the whole client graph"))
    grad_through_ma: str = field(default="straight_through", metadata=spec(choices=["straight_through", "scaled"]))
    ma_init: str = field(default="first", metadata=spec(choices=["first", "zeros"]))
    grad_init: str = field(default="zeros", metadata=spec(choices=["zeros", "first"]))
    cross_edge_weight: str = field(default="half", metadata=spec(choices=["half", "full", "owner"]))
    class_weighted: bool | None = None
    class_weights: list[float] | None = field(default=None, metadata=spec(
        gt=0.0, help="explicit cross-entropy class weights (Multi-GNN: gine [1.0, 6.275], pna [1.0, 7.078])"))
    weighting: str = field(default="uniform", metadata=spec(choices=["uniform", "train_items"]))
    positive_share: float | None = field(default=None, metadata=spec(
        gt=0.0, max=0.5, help="binary tasks: this share of every batch from the client's rarest class, loss "
                              "weights corrected to keep the objective (fgx/federation/stratified.py)"))
    aia_targets: int = field(default=0, metadata=spec(
        min=0, help="after the last round, run the attribute-inference attack on this many boundary nodes"))
    aia_steps: int = field(default=500, metadata=spec(min=1))
    aia_lr: float = field(default=0.01, metadata=spec(gt=0.0))


@dataclass
class CEClient:
    cid: int
    view: object
    model: nn.Module
    n_own: int
    halo_global: torch.Tensor
    boundary: torch.Tensor          # local ids of owned nodes with a cross-client edge
    layer_edges: list               # edge_index used at each layer
    hbar: list                      # per layer [n_own, d]: moving-average pre-activations
    hbar_init: list                 # per layer [n_own] bool
    remote: dict                    # 1-based layer -> [n_halo, d] embeddings received
    updated: list                   # per layer [n_own] bool: moving average updated this round
    G: dict
    optimizer: object
    loss_weight: torch.Tensor | None
    item_weight: torch.Tensor | None
    task: str
    owned_mp_edges: torch.Tensor    # internal edges for neighbourhood expansion
    layer0_owned_only: bool = False
    layer_uses_cross: list = None   # per layer: do messages from halo nodes enter it?
    sampler: object = None          # fgx.sampler.NeighborSampler over the client graph (fanouts set)


def _ma(c: CEClient, p: CEFedGNNParams, i: int, fresh: torch.Tensor, upd: torch.Tensor,
        ids: torch.Tensor, whole: bool = False) -> torch.Tensor:
    """Eq. 5 for the owned nodes ``ids`` (rows of ``fresh``): nodes in ``upd`` move their average
    towards the fresh value; the others keep their last average (a constant, no gradient).
    ``whole``: ``ids`` is every owned node in order (the whole client graph)."""
    if c.hbar[i] is None:
        c.hbar[i] = torch.zeros(c.n_own, *fresh.shape[1:], dtype=fresh.dtype, device=fresh.device)
        c.hbar_init[i] = torch.zeros(c.n_own, dtype=torch.bool, device=fresh.device)
    new, used = ma_rows(p, fresh, c.hbar[i][ids], c.hbar_init[i][ids], upd)
    if whole:
        c.hbar[i] = new                  # every row replaced; ``new`` carries no gradient
    else:
        hbar = c.hbar[i].clone()         # never in place: the step's autograd graph holds the old one
        hbar[ids] = new
        c.hbar[i] = hbar
    c.hbar_init[i][ids[upd]] = True
    c.updated[i][ids[upd]] = True
    return used


def ma_rows(p: CEFedGNNParams, fresh: torch.Tensor, old: torch.Tensor, has_value: torch.Tensor,
            upd: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 5 on rows: (the new moving averages, the values the step uses), from the rows' fresh values,
    their last averages ``old`` and whether they have one; rows not in ``upd`` keep ``old``."""
    # stale sharing (FedGNN-ST) is the moving average with gamma = 1: a node keeps the value of its
    # last update; "none" keeps the local estimators and only stops the exchange
    gamma = 1.0 if p.embedding_sharing == "stale" else p.gamma
    if p.ma_init == "first":
        old = torch.where(has_value.unsqueeze(-1), old, fresh.detach())
    m = upd.unsqueeze(-1)
    new = torch.where(m, (1 - gamma) * old + gamma * fresh.detach(), old)
    if p.grad_through_ma == "straight_through":
        used = new + (fresh - fresh.detach()) * m.to(fresh.dtype)
    else:
        used = torch.where(m, (1 - gamma) * old + gamma * fresh, old)
    return new, used


def _forward(c: CEClient, p: CEFedGNNParams, update: list | None, sample=None, train: bool = True,
             upto: int | None = None, score: torch.Tensor | None = None, chunk_edges: int | None = None,
             keeps: list | None = None):
    """Layer-by-layer forward on the client's whole graph (``sample`` None) or on a sampled
    subgraph (fgx.sampler, expansion stopped at halo nodes). ``update``: per layer, the owned nodes
    whose moving averages this step updates (full graph, see _update_layers); with a sample, a node at hop h updates layers up to
    L-h-1 (those whose sampled neighbourhood is complete). ``update`` None and no sample:
    evaluation, fresh values, no state change. Returns (outputs, the view they are over); with
    ``upto`` = l, (the owned rows' layer-l embeddings, their client-local node ids) instead. Evaluation
    on the whole graph runs each layer in chunks of ``chunk_edges`` in-edges (fgx.inference), layer i
    aggregating the edges ``keeps[i]`` (ids into the client view's edges; None: all); ``score`` (edge
    tasks): only these edges are scored, in this order, and ego IDs mark their endpoints."""
    model, L, n_own = c.model, c.model.num_layers, c.n_own
    dev = c.view.x.device
    if sample is None:
        view, edges = c.view, c.layer_edges
        if score is not None:
            view = inference.scored_view(view, c.task, score)
        n_rows = view.num_nodes
        own_pos = torch.arange(n_own, device=dev)
        halo_pos = torch.arange(n_own, n_rows, device=dev)
        own_ids, halo_ids = own_pos, halo_pos - n_own
        upd_layers = update
    else:
        from fgx.sampler import sample_view

        view = sample_view(c.view, sample).to(dev)
        nodes = sample.nodes.to(dev)
        n_rows = nodes.numel()
        owned = nodes < n_own
        own_pos, halo_pos = owned.nonzero().view(-1), (~owned).nonzero().view(-1)
        own_ids, halo_ids = nodes[own_pos], nodes[halo_pos] - n_own
        ei = view.edge_index
        internal = owned[ei[0]] & owned[ei[1]]
        edges = [ei if c.layer_uses_cross[i] else ei[:, internal] for i in range(L)]
        hop = sample.hop.to(dev)[own_pos]
        upd_layers = [hop <= L - 1 - i for i in range(L)] if train else None
    s = model.encode(view)
    h, e = s["h"], s["e"]
    if p.remote_layer0 != "raw" and halo_pos.numel():
        h = h.clone()
        h[halo_pos] = 0
    if sample is None and c.layer0_owned_only:
        h = h[:n_own]      # layer 0 sees no halo node: skip their rows (identical result, less work)
    # sampled edge tasks with an in-edge model (LayerwiseModel.trim_exact): the last layer updates only
    # the seed edges' features (the only ones the readout reads); evaluation also runs layer i on the
    # edges picked at hops <= L - i only (fgx.sampler orders them so): the seeds' outputs are unchanged
    trim = sample is not None and c.task == "edge" and getattr(model, "trim_exact", False)
    ends = sample.edge_hop_end if trim and not train else None
    for i in range(L):
        ei = edges[i]
        if ends:
            n = ends[min(L - i, len(ends) - 1)]
            ei, e = ei[:, :n], e[:n]
        if sample is None and upd_layers is None:     # whole-graph evaluation: chunked, each layer once
            keep = keeps[i] if keeps else None
            if keep is not None and ei.size(1) < view.edge_index.size(1):
                keep = keep[keep < ei.size(1)]        # a layer without cross edges: the internal ones come first
            pre, e = inference.run_layer(model, i, h, e, ei, chunk_edges, keep=keep,
                                         update=inference.edges_to_update(keeps or [None] * L, i, score))
        elif trim and i == L - 1:
            pre, e = model.layer(i, h, e, ei, edge_out=sample.num_seed_edges)
        else:
            pre, e = model.layer(i, h, e, ei)
        fresh = pre[own_pos]
        used = fresh if upd_layers is None else _ma(c, p, i, fresh, upd_layers[i], own_ids, whole=sample is None)
        h_own = model.activate(i, used)
        if upto == i + 1:
            return h_own, own_ids
        halo = _halo_rows(c, i + 1, h_own, p, halo_ids)
        if sample is None:
            h = torch.cat([h_own, halo], 0)
        else:
            h = torch.zeros(n_rows, *h_own.shape[1:], dtype=h_own.dtype, device=dev)
            h = h.index_put((own_pos,), h_own).index_put((halo_pos,), halo)
    if sample is not None and c.task == "edge":
        # only the seed edges (first in the sample) are scored: the readout skips the rest
        k = sample.num_seed_edges
        return model.head(h, e[:k], view.edge_index[:, :k], view), view
    if score is not None:
        return model.head(h, e[score], view.edge_index[:, score], view), view
    return model.head(h, e, view.edge_index, view), view


def _halo_rows(c: CEClient, layer: int, like: torch.Tensor, p: CEFedGNNParams, halo_ids: torch.Tensor) -> torch.Tensor:
    if p.embedding_sharing != "none" and layer in c.remote:
        return c.remote[layer][halo_ids]
    return torch.zeros(halo_ids.numel(), *like.shape[1:], dtype=like.dtype, device=like.device)


def _update_layers(c: CEClient, batch_items: torch.Tensor | None, L: int) -> list[torch.Tensor]:
    """Whole-graph steps: per layer, the owned nodes whose moving average this step updates. The
    step's seeds (seed nodes, or the endpoints of seed edges) need their last layer; a node h hops
    upstream (inside the client) feeds them through layer L-h, so layer i (0-based) is updated for
    the nodes within L-1-i hops. All owned nodes at every layer when the batch is everything."""
    dev = c.view.x.device
    if batch_items is None:
        return [torch.ones(c.n_own, dtype=torch.bool, device=dev)] * L
    if c.task == "edge":
        seeds = torch.unique(c.view.edge_index[:, batch_items].reshape(-1))
        seeds = seeds[seeds < c.n_own]
    else:
        seeds = batch_items
    reach = torch.zeros(c.n_own, dtype=torch.bool, device=dev)
    reach[seeds] = True
    masks = [reach]
    src, dst = c.owned_mp_edges
    for _ in range(L - 1):
        reach = reach.clone()
        reach[src[reach[dst]]] = True     # messages flow src -> dst: a node's inputs are its in-neighbours
        masks.append(reach)
    return masks[::-1]


def local_round(c: CEClient, p: CEFedGNNParams, global_state: dict, global_G: dict, rseed: int, share: list,
                first_round: bool):
    """Client side of one round: K steps of Eq. 5 / Eq. 9; returns (update, G, shared embeddings, loss)."""
    c.model.load_state_dict(global_state)
    for k, v in (global_G or {}).items():      # None: W-only communication, the client keeps its own G
        c.G[k] = v.clone()
    g = torch.Generator().manual_seed(rseed + c.cid)
    c.updated = [torch.zeros(c.n_own, dtype=torch.bool, device=c.view.x.device) for _ in range(c.model.num_layers)]
    mask, y = targets(c.view, c.task, "train")
    train_ids = mask.nonzero().view(-1)
    L = c.model.num_layers
    losses = []
    c.model.train()
    if train_ids.numel() == 0:
        return _upload(c, global_state, share) + (float("nan"),)
    plan = stratified_batches(y, p.batch_size, p.positive_share)
    lw = c.loss_weight
    if plan is not None:
        lw = plan.correction.to(device=train_ids.device, dtype=torch.float) * (1 if lw is None else lw)
    for step in range(p.local_steps):
        tick(f"client {c.cid} step", step + 1, p.local_steps)
        if plan is not None:
            pick = plan.draw(g).to(train_ids.device)
        elif p.batch_size is not None and p.batch_size < train_ids.numel():
            pick = torch.randperm(train_ids.numel(), generator=g)[:p.batch_size].to(train_ids.device)
        else:
            pick = torch.arange(train_ids.numel(), device=train_ids.device)
        items = train_ids[pick]
        if p.fanouts and p.batch_size is not None:
            sample = (c.sampler.sample_edges if c.task == "edge" else c.sampler.sample_nodes)(items.cpu(), g)
            out, sub = _forward(c, p, None, sample)
            n_seed = sample.num_seed_edges if c.task == "edge" else sample.num_seed_nodes
            logits = out[:n_seed]
            seed_items = sample.edge_ids[:n_seed] if c.task == "edge" else sample.nodes[:n_seed]
            seed_items = seed_items.to(items.device)
            yb = (c.view.edge_y if c.task == "edge" else c.view.y)[seed_items]
        else:
            upd = _update_layers(c, items if p.batch_size is not None else None, L)
            out, _ = _forward(c, p, upd)
            logits, yb, seed_items = out[items], y[pick], items
        per = nn.functional.cross_entropy(logits, yb, weight=lw, reduction="none")
        w = lw[yb] if lw is not None else torch.ones_like(per)
        if c.item_weight is not None:
            w = w * c.item_weight[seed_items]
            per = per * c.item_weight[seed_items]
        loss = per.sum() / w.sum().clamp(min=1e-12)
        c.optimizer.zero_grad()
        loss.backward()
        for name, prm in c.model.named_parameters():
            grad = prm.grad if prm.grad is not None else torch.zeros_like(prm)
            if p.weight_decay:
                grad = grad + p.weight_decay * prm.detach()
            if p.grad_init == "first" and step == 0 and first_round:
                c.G[name] = grad.detach().clone()
            else:
                c.G[name] = (1 - p.beta) * c.G[name] + p.beta * grad.detach()
        if p.local_optimizer == "ema_sgd":
            with torch.no_grad():
                for name, prm in c.model.named_parameters():
                    prm -= p.lr * c.G[name]
        else:
            for name, prm in c.model.named_parameters():
                prm.grad = c.G[name]      # no copy: G[name] is rebound (not changed in place) every step
            c.optimizer.step()
        losses.append(float(loss.detach()))
    return _upload(c, global_state, share) + (sum(losses) / len(losses),)


def _upload(c: CEClient, global_state: dict, share: list):
    update = state_delta(c.model.state_dict(), global_state)
    emb = []
    if share and c.boundary.numel() > 0:
        with torch.no_grad():
            for layer in share:
                # only the boundary nodes whose layer-`layer` average moved this round: a node reached
                # only at a shallower layer has no new value here (and may never have had one)
                sel = c.boundary[c.updated[layer - 1][c.boundary]]
                if sel.numel() == 0:
                    continue
                vals = c.model.activate(layer - 1, c.hbar[layer - 1][sel]).detach()
                emb.append({"layer": layer, "ids": c.view.global_ids[sel], "values": vals})
    return update, {k: v.clone() for k, v in c.G.items()}, emb


@ALGORITHMS.register("ce_fedgnn", params=CEFedGNNParams, tasks=("node", "edge"))
class CEFedGNN(Algorithm):
    messages = {
        "global_weights": Message("down"),
        "global_grad_estimator": Message("down"),
        "update": Message("up", release=True),
        "grad_estimator": Message("up", release=True),
        "embeddings": Message("up", release=True),
        "embeddings_routed": Message("down"),
        "raw_features": Message("down", raw=True, reason="remote_layer0=raw: only for datasets whose node "
                                                         "features are public (AML: constant 1 + ego-ID bit)"),
    }

    @classmethod
    def check_config(cls, params, validated) -> None:
        if params.remote_layer0 == "raw" and not validated.features_public:
            raise ConfigError("algorithm.remote_layer0", "raw", f"drop, zeros or auto: dataset "
                              f"'{validated.names['dataset']}' does not declare its node features public "
                              f"(dataset.features_public=true, where the dataset has that key)")
        if params.remote_layer0 == "auto":
            params.remote_layer0 = "raw" if validated.features_public else "drop"
        if params.share_layers and 0 in params.share_layers:
            raise ConfigError("algorithm.share_layers", params.share_layers,
                              "layers >= 1 (sharing layer 0 sends raw node features; use remote_layer0=raw "
                              "on a dataset that declares its features public)")
        layers = getattr(validated.params["model"], "layers", None)
        if layers is not None and params.share_layers and max(params.share_layers) > layers:
            raise ConfigError("algorithm.share_layers", params.share_layers, f"layers between 1 and {layers}")

    def setup(self) -> None:
        p, ctx = self.params, self.ctx
        self.task = ctx.info.task
        self.global_model = ctx.build_model()
        L = self.global_model.num_layers
        self.share = list(p.share_layers) if p.share_layers else (
            list(range(1, L)) if self.task == "node" else list(range(1, L + 1)))
        if p.embedding_sharing == "none":
            self.share = []
        self.global_G = {k: torch.zeros_like(v) for k, v in self.global_model.named_parameters()}
        n_global = ctx.global_data.num_nodes if ctx.global_data is not None else \
            int(max(int(torch.cat([c.nodes, c.halo]).max()) for c in ctx.clients)) + 1
        # server buffer: latest shared embedding per (layer, global node), and whether one exists
        self.buffer: dict[int, torch.Tensor | None] = {l: None for l in self.share}
        self.buffer_has: dict[int, torch.Tensor] = {l: torch.zeros(n_global, dtype=torch.bool) for l in self.share}
        self.clients = [self._make_client(c) for c in ctx.clients]
        if p.remote_layer0 == "raw":
            self._send_raw_features()

    def _make_client(self, client) -> CEClient:
        p, ctx = self.params, self.ctx
        n_own = client.num_owned
        d = client.data
        if self.task == "edge":
            view = local_view(client, "edge", include_cross=True)
            mp = view.edge_index
            layer_edges = [mp] * self.global_model.num_layers
            uses_cross = [True] * self.global_model.num_layers
            owned_mp = d.edge_index
        else:
            view = local_view(client, "node", include_cross=True)
            ce = d.cross_edge_index
            into_owned = ce[:, ce[1] < n_own]          # halo -> owned: messages into owned nodes only
            internal = d.edge_index
            with_cross = torch.cat([internal, into_owned], 1)
            keep_cross = p.embedding_sharing != "none"
            layer_edges, uses_cross = [], []
            for i in range(self.global_model.num_layers):
                use = keep_cross and (i > 0 or p.remote_layer0 != "drop")
                layer_edges.append(with_cross if use else internal)
                uses_cross.append(use)
            view.edge_index = layer_edges[-1]
            owned_mp = internal
        view.global_ids = torch.cat([client.nodes, client.halo])
        boundary = torch.unique(d.cross_edge_index.reshape(-1))
        boundary = boundary[boundary < n_own]
        model = ctx.build_model()
        weighted = p.class_weighted if p.class_weighted is not None else self.task == "edge"
        mask, y = targets(view, self.task, "train")
        lw = class_weights(y, ctx.out_dim) if weighted and y.numel() else None
        check_positive_share(p.positive_share, p.batch_size, ctx.out_dim)
        if p.class_weights:
            if len(p.class_weights) != ctx.out_dim:
                raise ConfigError("algorithm.class_weights", p.class_weights, f"a list of {ctx.out_dim} weights")
            lw = torch.tensor(p.class_weights, dtype=torch.float)
        item_w = None
        if self.task == "edge":
            item_w = torch.ones(view.edge_index.size(1))
            if p.cross_edge_weight == "half":
                item_w[view.is_cross] = 0.5
            elif p.cross_edge_weight == "owner":
                # each cross edge's loss goes to one of its two holders, fixed by the global edge id: a
                # bit of its hash picks the holder of the endpoint with the lower or the higher global id
                # (each holder owns exactly one endpoint of a cross edge, so exactly one holder agrees)
                gid = torch.cat([d.global_edge_id, d.cross_global_edge_id])
                src, dst = view.edge_index
                lower_end = torch.where(view.global_ids[src] <= view.global_ids[dst], src, dst)
                mine = (gid * 2654435761 + ctx.seed) % 2 == (lower_end < n_own).long()
                item_w[view.is_cross & ~mine] = 0.0
        opt = torch.optim.Adam(model.parameters(), lr=p.lr)
        sampler = None
        if p.fanouts:
            from fgx.sampler import NeighborSampler
            halo_local = torch.arange(n_own, view.num_nodes)
            # messages flow into a node along its in-edges; expansion stops at remote (halo) nodes
            sampler = NeighborSampler(view.edge_index, view.num_nodes, list(p.fanouts), direction="in",
                                      stop_at=halo_local)
        layer0_owned_only = self.task == "node" and bool(
            (layer_edges[0].numel() == 0) or int(layer_edges[0].max()) < n_own)
        dev = ctx.device
        L = model.num_layers
        return CEClient(cid=client.cid, view=view.to(dev), model=model, n_own=n_own, halo_global=client.halo,
                        boundary=boundary.to(dev), layer_edges=[e.to(dev) for e in layer_edges],
                        hbar=[None] * L, hbar_init=[None] * L, remote={}, updated=[],
                        G={k: torch.zeros_like(v) for k, v in model.named_parameters()}, optimizer=opt,
                        loss_weight=None if lw is None else lw.to(dev),
                        item_weight=None if item_w is None else item_w.to(dev), task=self.task,
                        owned_mp_edges=owned_mp.to(dev), layer0_owned_only=layer0_owned_only,
                        layer_uses_cross=uses_cross, sampler=sampler)

    def _send_raw_features(self) -> None:
        """remote_layer0=raw: the server routes each halo node's (public) features once."""
        x = self.ctx.global_data.x
        for c in self.clients:
            if c.halo_global.numel():
                feats = self.ctx.channel.send("raw_features", x[c.halo_global], src="server", dst=c.cid, round=0)
                c.view.x[c.n_own:] = feats.to(c.view.x.device)

    def round(self, r: int) -> dict[str, float]:
        p, ch = self.params, self.ctx.channel
        ids = [c.cid for c in self.clients]
        gw = ch.broadcast("global_weights", flat_params(self.global_model), ids, r)
        gG = ch.broadcast("global_grad_estimator", self.global_G, ids, r) if p.share_grad_estimator else None
        results = self._local_rounds(gw, gG, r)
        updates, Gs, losses = [], [], []
        fresh = {layer: [] for layer in self.share}     # global ids uploaded this round, per layer
        for c, (upd, G, emb, loss) in zip(self.clients, results):
            updates.append(ch.send("update", upd, src=c.cid, dst="server", round=r))
            if p.share_grad_estimator:
                Gs.append(ch.send("grad_estimator", G, src=c.cid, dst="server", round=r))
            for e in emb:
                got = ch.send("embeddings", e, src=c.cid, dst="server", round=r)
                layer, ids, vals = got["layer"], got["ids"].cpu(), got["values"].detach().cpu()
                if self.buffer[layer] is None:
                    self.buffer[layer] = torch.zeros(self.buffer_has[layer].numel(), vals.size(-1))
                self.buffer[layer][ids] = vals
                self.buffer_has[layer][ids] = True
                fresh[layer].append(ids)
            losses.append(loss)
        weights = aggregation_weights(self.clients, p.weighting, at_least_one=True)
        add_delta(self.global_model, ch.aggregate("update", weighted_average(updates, weights), len(updates), r))
        if p.share_grad_estimator:
            self.global_G = ch.aggregate("grad_estimator", weighted_average(Gs, weights), len(Gs), r)
        self._route(r, fresh)
        if p.aia_targets and r == self.ctx.rounds:
            self.ctx.record("attack_aia", self.attribute_inference())
        return {"loss": mean_loss(losses)}

    def _local_rounds(self, gw: dict, gG: dict | None, r: int) -> list:
        """Every client's local_round: executor=batched steps the clients together where
        ce_fedgnn_batched allows it (the same results bit for bit), any other executor maps the loop."""
        from fgx.algorithms import ce_fedgnn_batched
        from fgx.federation.batched import BatchedExecutor

        p, ex, rseed = self.params, self.ctx.executor, round_seed(self.ctx.seed, r)
        if isinstance(ex, BatchedExecutor) and ce_fedgnn_batched.refusal(self.clients, p) is None:
            return ce_fedgnn_batched.local_rounds(self.clients, p, gw, gG, rseed, self.share, r == 1,
                                                  ex.client_seeds(self.clients), ex.params.group_nodes,
                                                  ce_fedgnn_batched.Loop(local_round, _upload, ma_rows))
        return ex.map(local_round, self.clients, p, gw, gG, rseed, self.share, r == 1)

    def attribute_inference(self) -> dict:
        """Spec §3.5: reconstruct boundary nodes' raw features from their released layer-1 embedding
        (as the receiving clients got it, i.e. after the privacy mechanism), knowing the model and the
        target's neighbourhood. Node tasks with informative features only."""
        from fgx.privacy.attacks import nearest_percent_baseline, reconstruct_features

        p = self.params
        if self.task != "node" or 1 not in self.share or self.buffer[1] is None:
            return {"skipped": "needs a node task with layer 1 shared"}
        model = self.global_model
        model.eval()
        g = torch.Generator().manual_seed(self.ctx.seed)
        cands = [(c, int(v)) for c in self.clients for v in c.boundary.tolist()
                 if self.buffer_has[1][int(c.view.global_ids[v])]]
        pick = torch.randperm(len(cands), generator=g)[:p.aia_targets].tolist()
        errs, targets = [], []
        x_all = self.ctx.global_data.x
        for i in pick:
            c, v = cands[i]
            gid = int(c.view.global_ids[v])
            released = self.buffer[1][gid]
            x_local = c.view.x[:c.n_own]
            ei = c.layer_edges[0]
            neigh = ei[0, ei[1] == v]
            init = x_local[neigh].mean(0) if neigh.numel() else torch.zeros_like(x_local[v])

            def embed(xv, c=c, v=v, x_local=x_local, ei=ei):
                x = x_local.clone()
                x[v] = xv
                pre, _ = model.layer(0, x, None, ei)
                h = model.activate(0, pre)[v]
                return h / h.norm().clamp(min=1e-12) if getattr(self.ctx.privacy.params, "embedding_norm", None) \
                    == "normalize" else h

            with torch.enable_grad():
                rec = reconstruct_features(embed, released, init, p.aia_steps, p.aia_lr)
            errs.append(float((rec - x_local[v]).pow(2).mean()))
            targets.append(gid)
        if not errs:
            return {"skipped": "no boundary node has a shared embedding"}
        base = nearest_percent_baseline(x_all, torch.tensor(targets), 1.0)
        return {"targets": len(errs), "mse": sum(errs) / len(errs), "baseline_nn1pct_mse": base,
                "mse_above_baseline": sum(errs) / len(errs) > base}

    def _route(self, r: int, fresh: dict[int, list[torch.Tensor]]) -> None:
        """Send each client the embeddings uploaded this round for its halo nodes; a client keeps the
        rows it received before ("when an embedding is not updated, the most recently shared value is
        reused"), so rows that did not change are not sent again."""
        n_global = next(iter(self.buffer_has.values())).numel() if self.buffer_has else 0
        for layer, parts in fresh.items():
            if not parts:
                continue
            new = torch.zeros(n_global, dtype=torch.bool)
            new[torch.cat(parts)] = True
            values = self.buffer[layer]
            for c in self.clients:
                idx = new[c.halo_global].nonzero().view(-1)
                if idx.numel() == 0:
                    continue
                ids = c.halo_global[idx]
                got = self.ctx.channel.send("embeddings_routed", {"layer": layer, "ids": ids, "values": values[ids]},
                                            src="server", dst=c.cid, round=r)
                cur = c.remote.get(layer)
                cur = torch.zeros(c.halo_global.numel(), values.size(-1), device=self.ctx.device) \
                    if cur is None else cur.clone()
                cur[idx.to(cur.device)] = got["values"].to(cur.device)
                c.remote[layer] = cur

    def model_for(self, client):
        return self.global_model

    def predict(self, client, local: bool = False, splits=SPLITS, subset: int | None = None,
                batch_size: int | None = None) -> dict:
        """Scores of the client's items of ``splits`` under the global model (base.Algorithm.predict)."""
        from fgx.algorithms.base import eval_items, per_split, score_items

        if local:
            self.local_model_for(client)        # raises: CE-FedGNN scores with the global model

        c = self.clients[client.cid]
        c.model.load_state_dict(self.global_model.state_dict())
        c.model.eval()
        p = self.params
        items = eval_items(c.view, self.task, splits, subset, self.ctx.seed, client.cid)
        chunk = inference.chunk_edges(self.ctx)
        with torch.no_grad():
            if c.sampler is not None and p.batch_size:
                if not inference.use_layerwise(self.ctx, c.model, subset):
                    return score_items(c.view, self.task, items, c.sampler, batch_size or p.batch_size,
                                       lambda smp: _forward(c, p, None, smp, train=False)[0],
                                       self.ctx.out_dim, self.ctx.seed)
                # layer-wise: each layer once for the whole client graph, at most the training fanout
                # of in-edges per node, ego IDs on the scored edges (fgx.inference)
                uniq, inv = torch.unique(torch.cat([ids for ids, _ in items.values()]), return_inverse=True)
                edge = self.task == "edge"
                keeps = inference.layer_edges(c.sampler, p.fanouts, c.model.num_layers, self.ctx.seed)
                scores, _ = _forward(c, p, None, score=uniq if edge else None, chunk_edges=chunk, keeps=keeps)
                return per_split(scores if edge else scores[uniq], inv, items)
            scores, _ = _forward(c, p, None, chunk_edges=chunk)
        return {split: (scores[ids].cpu(), y.cpu()) for split, (ids, y) in items.items()}

    def released_embeddings(self) -> torch.Tensor | None:
        """The last shared embedding of every boundary node (deepest shared layer), pre-noise values
        as the server holds them (metric-DP's ``rho_population=boundary_only``)."""
        if not self.share:
            return None
        layer = max(self.share)
        if self.buffer[layer] is None:
            return None
        return self.buffer[layer][self.buffer_has[layer]]

    def node_embeddings(self, max_nodes: int | None = None, seed: int = 0) -> torch.Tensor | None:
        """The released layer (deepest shared) of every owned node, or of ``max_nodes`` of them drawn
        at random, under the current global model, without noise (metric-DP's ρ over all nodes, spec
        §3.4). Computed the way evaluation sees the graph (sampled neighbourhoods when ``fanouts``)."""
        if not self.share:
            return None
        layer, p = max(self.share), self.params
        g = torch.Generator().manual_seed(seed)
        owners = torch.cat([torch.full((c.n_own,), i, dtype=torch.long) for i, c in enumerate(self.clients)])
        local = torch.cat([torch.arange(c.n_own) for c in self.clients])
        if max_nodes is not None and max_nodes < owners.numel():
            pick = torch.randperm(owners.numel(), generator=g)[:max_nodes]
            owners, local = owners[pick], local[pick]
        out = []
        state = self.global_model.state_dict()
        with torch.no_grad():
            for i, c in enumerate(self.clients):
                ids = local[owners == i]
                if ids.numel() == 0:
                    continue
                c.model.load_state_dict(state)
                c.model.eval()
                if c.sampler is None:
                    h, _ = _forward(c, p, None, upto=layer)
                    out.append(h[ids.to(h.device)].cpu())
                    continue
                for chunk in ids.split(max(p.batch_size or 0, 4096)):
                    smp = c.sampler.sample_nodes(chunk, g)
                    h, own = _forward(c, p, None, smp, train=False, upto=layer)
                    out.append(h[: smp.num_seed_nodes].cpu())    # the seeds come first (all owned)
        return torch.cat(out) if out else None

    def state_dict(self) -> dict:
        return {"global": self.global_model.state_dict(), "G": self.global_G,
                "buffer": {str(l): {"values": v, "has": self.buffer_has[l]} for l, v in self.buffer.items()},
                "clients": [{"hbar": [h for h in c.hbar], "hbar_init": [h for h in c.hbar_init],
                             "remote": {str(k): v for k, v in c.remote.items()},
                             "G": c.G, "opt": c.optimizer.state_dict()} for c in self.clients]}

    def load_state_dict(self, state: dict) -> None:
        self.global_model.load_state_dict(state["global"])
        self.global_G = state["G"]
        for l, b in state["buffer"].items():
            self.buffer[int(l)], self.buffer_has[int(l)] = b["values"], b["has"]
        for c, cs in zip(self.clients, state["clients"]):
            c.hbar, c.hbar_init = list(cs["hbar"]), list(cs["hbar_init"])
            c.remote = {int(k): v for k, v in cs["remote"].items()}
            c.G = cs["G"]
            c.optimizer.load_state_dict(cs["opt"])
