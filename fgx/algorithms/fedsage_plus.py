"""FedSage+ (Zhang et al., NeurIPS 2021, "Subgraph Federated Learning with Missing Neighbor Generation").

Two phases, both inside fgx's run:

1. NeighGen (in ``setup()``, counted in round 0). Each client hides ``hide_ratio`` of its nodes (drawn
   from nodes that are neither training nor test nodes, as the authors' code does) to get an impaired
   subgraph; for every kept node the targets are its number of hidden neighbours and the features of
   up to ``num_pred`` of them. Each client has its own NeighGen: a 2-layer GraphSAGE encoder, dGen
   (predicts the number of missing neighbours, smooth-L1 loss) and fGen (generates ``num_pred`` feature
   vectors per node, greedily matched to the hidden neighbours' features), trained jointly with an
   auxiliary GraphSAGE classifier on the impaired graph mended with the generated neighbours
   (loss a·L_num + b·L_feat + c·L_cls). First ``local_gen_epochs`` local full-batch steps; then
   ``fed_gen_epochs`` steps of fGen only, whose loss adds the paper's cross-subgraph term: generated
   features should be close to the nearest real features of every other client. Raw features never
   leave a client: client i's NeighGen parameters go (through the server) to each other client j,
   which runs them on its own impaired graph, computes the distance of the generated features to the
   nearest of its own feature rows, and returns only the gradient w.r.t. fGen_i's parameters; the
   server sums these gradients and sends them to client i, which adds them to its own gradient.
2. FedSage: every client mends its subgraph with its trained NeighGen (the kept nodes get their
   predicted number of generated neighbours, clamped to ``num_pred``), then the GraphSAGE classifier
   is trained with FedAvg on the mended subgraphs. Generated nodes carry no labels and are never
   evaluated: metrics are over each client's real nodes only.

Where the paper is silent the authors' code (github.com/zkhku/fedsage) decides: loss weights
a = b = c = 1, the cross term weighted like the feature term and everything divided by the number of
clients in the federated phase; 20 local + 20 federated full-batch NeighGen epochs, Adam lr 1e-3,
weight decay 1e-4; encoder 32 hidden / 128 latent units, fGen 256 -> 2048 -> num_pred·F with N(0, 1)
noise on its input and tanh output; predicted counts truncated to integers (``count_rounding: floor``;
FederatedScope rounds them: ``round``); NeighGen losses on the kept training nodes; NeighGen runs on the
impaired graph and its output mends the kept nodes of the original subgraph.

Differences from the reference code, on purpose: (1) the cross term. The authors' simulation reads the
other clients' raw features directly (random neighbours of random nodes as targets) and FederatedScope
ships client i's node embeddings with fGen_i; fgx sends only parameters and gradients (above), so
client j queries NeighGen_i with its own kept training nodes and the target is the nearest of all of
j's feature rows (the paper's min over V_j). (2) Each client keeps its own NeighGen, as in the paper and
both codes (the other clients' gradients are added to fGen_i); NeighGen is not FedAvg'd. Costs: each
federated NeighGen epoch sends M NeighGen uploads, M(M-1) relayed NeighGens, M(M-1) fGen gradients and
M gradient sums (with F = 1433 and the default fGen, about 60 MB each)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from fgx.algorithms.base import check_client_size
from fgx.algorithms.fedavg import FedAvg, FedAvgParams
from fgx.config import spec
from fgx.federation.channel import Message
from fgx.federation.client import ClientState
from fgx.federation.executor import InProcessExecutor
from fgx.models.base import dropout
from fgx.models.sage import sage_layer
from fgx.registry import ALGORITHMS


@dataclass
class FedSagePlusParams(FedAvgParams):
    hide_ratio: float = field(default=0.15, metadata=spec(
        gt=0.0, max=0.9, help="fraction h of each client's nodes hidden to build the impaired subgraph"))
    num_pred: int = field(default=5, metadata=spec(min=1, help="most generated neighbours per node"))
    count_rounding: str = field(default="floor", metadata=spec(
        choices=["floor", "round"], help="dGen's prediction -> number of generated neighbours: floor (authors' "
                                         "code) or round (FederatedScope)"))
    local_gen_epochs: int = field(default=20, metadata=spec(
        min=0, help="local full-batch NeighGen steps (encoder, dGen, fGen, auxiliary classifier)"))
    fed_gen_epochs: int = field(default=20, metadata=spec(
        min=0, help="federated fGen steps with the cross-client term"))
    gen_lr: float = field(default=1e-3, metadata=spec(gt=0.0))
    gen_weight_decay: float = field(default=1e-4, metadata=spec(min=0.0))
    encoder_hidden: int = field(default=32, metadata=spec(min=1, help="GraphSAGE encoder hidden units"))
    latent_dim: int = field(default=128, metadata=spec(min=1, help="encoder output = dGen/fGen input"))
    fgen_hidden: list[int] = field(default_factory=lambda: [256, 2048], metadata=spec(
        min=1, help="fGen hidden layer sizes"))
    gen_dropout: float = field(default=0.5, metadata=spec(min=0.0, max=1.0))
    num_weight: float = field(default=1.0, metadata=spec(min=0.0, help="a: weight of the dGen loss"))
    feat_weight: float = field(default=1.0, metadata=spec(min=0.0, help="b: weight of the fGen loss"))
    cls_weight: float = field(default=1.0, metadata=spec(min=0.0, help="c: weight of the auxiliary classifier loss"))
    cross_weight: float = field(default=1.0, metadata=spec(
        min=0.0, help="weight of the cross-client fGen term (0: no exchange, locally trained NeighGen)"))
    max_client_nodes: int = field(default=10_000, metadata=spec(
        min=1, help="refuse clients larger than this: node generation on the fly does not scale"))


# ---- NeighGen -------------------------------------------------------------------------------------

class NeighGen(nn.Module):
    """GraphSAGE encoder -> dGen (number of missing neighbours) and fGen (their features)."""

    def __init__(self, in_dim: int, p: FedSagePlusParams):
        super().__init__()
        from torch_geometric.nn import SAGEConv

        self.num_pred, self.num_features = p.num_pred, in_dim
        self.dropout, self.rounding = p.gen_dropout, p.count_rounding
        self.encoder = nn.ModuleList([SAGEConv(in_dim, p.encoder_hidden), SAGEConv(p.encoder_hidden, p.latent_dim)])
        self.dgen = nn.Linear(p.latent_dim, 1)
        sizes = [p.latent_dim, *p.fgen_hidden, p.num_pred * in_dim]
        self.fgen = nn.ModuleList([nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:])])

    def embed(self, x, edge_index) -> torch.Tensor:
        z = torch.relu(sage_layer(self.encoder[0], x, edge_index, raw_input=True))
        return torch.relu(sage_layer(self.encoder[1], dropout(z, self.dropout, self.training), edge_index))

    def generate(self, z, noise: torch.Generator) -> torch.Tensor:
        """fGen: num_pred feature vectors per embedding, sampled around it (N(0, 1) noise) -> [R, num_pred, F]."""
        h = z + torch.randn(z.shape, generator=noise).to(z.device)
        for lin in self.fgen[:-1]:
            h = torch.relu(lin(h))
        h = torch.tanh(self.fgen[-1](dropout(h, self.dropout, self.training)))
        return h.view(z.size(0), self.num_pred, self.num_features)

    def forward(self, x, edge_index, noise: torch.Generator, rows: torch.Tensor | None = None):
        """(predicted number of missing neighbours [R], generated features [R, num_pred, F]) for the nodes
        ``rows`` (default: all; the encoder sees the whole graph). fGen runs only on nodes whose count
        (``counts``) is > 0: the others get zero rows, which no loss and no mending reads."""
        z = self.embed(x, edge_index)
        if rows is not None:
            z = z[rows]
        num = torch.relu(self.dgen(z)).view(-1)
        active = (counts(num, self.num_pred, self.rounding) > 0).nonzero().view(-1)
        feats = z.new_zeros(z.size(0), self.num_pred, self.num_features)
        return num, feats.index_copy(0, active, self.generate(z[active], noise))


def fgen_names(gen: nn.Module) -> list[str]:
    return [k for k, _ in gen.named_parameters() if k.startswith("fgen.")]


def counts(num: torch.Tensor, num_pred: int, rounding: str = "floor") -> torch.Tensor:
    """Generated neighbours per node: the predicted number made an integer (floor or round), at most num_pred."""
    k = num.detach().floor() if rounding == "floor" else num.detach().round()
    return k.clamp(0, num_pred).long()


def sq_dist(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Mean squared difference between rows: a [..., n, F], b [..., m, F] -> [..., n, m]."""
    d = (a * a).sum(-1)[..., :, None] + (b * b).sum(-1)[..., None, :] - 2 * a @ b.transpose(-1, -2)
    return d.clamp(min=0) / a.size(-1)


def greedy_feature_loss(gen, k, true_x, true_num, num_pred: int) -> torch.Tensor:
    """fGen's loss: each of node v's first k_v (its ``counts``) generated vectors is matched to the nearest
    of its first min(num_pred, n_v) hidden neighbours (MSE); nodes without hidden neighbours add nothing;
    the sum is divided by nodes × num_pred (the authors' greedy_loss, vectorised)."""
    n = gen.size(0)
    if n == 0:
        return gen.sum()
    slots = torch.arange(num_pred, device=gen.device)
    valid_target = slots[None, None, :] < true_num.clamp(1, num_pred)[:, None, None]
    best = sq_dist(gen, true_x).masked_fill(~valid_target, float("inf")).min(-1).values      # [N, P]
    used = (slots[None, :] < k[:, None]) & (true_num[:, None] > 0)
    return torch.where(used, best, torch.zeros_like(best)).sum() / (n * num_pred)


def nearest_feature_loss(gen, k, feats, num_pred: int) -> torch.Tensor:
    """The cross-subgraph term at another client: each of node v's first k_v generated vectors
    against the nearest feature row of that client's subgraph (MSE), divided by nodes × num_pred."""
    n = gen.size(0)
    if n == 0 or feats.size(0) == 0:
        return gen.sum() * 0.0
    best = sq_dist(gen.reshape(n * num_pred, -1), feats).min(1).values.view(n, num_pred)
    used = torch.arange(num_pred, device=gen.device)[None, :] < k[:, None]
    return torch.where(used, best, torch.zeros_like(best)).sum() / (n * num_pred)


def mend(x, edge_index, attach_to, k, gen):
    """Attach to node attach_to[i] its first k[i] generated vectors gen[i] as new nodes (ids after the
    existing ones, an edge each way). Returns (x', edge_index')."""
    owner = torch.repeat_interleave(torch.arange(k.numel(), device=k.device), k)
    slot = torch.arange(owner.numel(), device=k.device) - (torch.cumsum(k, 0) - k)[owner]
    new = x.size(0) + torch.arange(owner.numel(), device=k.device)
    e = torch.stack([attach_to[owner], new])
    return torch.cat([x, gen[owner, slot].to(x.dtype)]), torch.cat([edge_index, e, e.flip(0)], 1)


# ---- client side (module-level so that any executor can run it) -------------------------------------

def impaired_graph(view, hidden: torch.Tensor, num_pred: int):
    """The client's subgraph without ``hidden`` nodes, with NeighGen's targets on the kept nodes:
    ``num_missing`` (hidden neighbours) and ``x_missing`` (features of the first num_pred of them, by id,
    zero-padded). ``x_all`` keeps every real feature row (targets of the cross-client term at this client)."""
    from torch_geometric.data import Data

    n = view.num_nodes
    is_hidden = torch.zeros(n, dtype=torch.bool, device=view.x.device)
    is_hidden[hidden] = True
    src, dst = view.edge_index
    lost = is_hidden[src] & ~is_hidden[dst]                      # a kept node loses a hidden neighbour
    s, d = src[lost], dst[lost]
    order = torch.argsort(d * n + s)
    s, d = s[order], d[order]
    num_missing = torch.bincount(d, minlength=n)
    rank = torch.arange(d.numel(), device=d.device) - (torch.cumsum(num_missing, 0) - num_missing)[d]
    first = rank < num_pred
    x_missing = torch.zeros(n, num_pred, view.x.size(1), device=view.x.device)
    x_missing[d[first], rank[first]] = view.x[s[first]].float()
    keep = (~is_hidden).nonzero().view(-1)
    relabel = torch.full((n,), -1, dtype=torch.long, device=view.x.device)
    relabel[keep] = torch.arange(keep.numel(), device=view.x.device)
    both = ~is_hidden[src] & ~is_hidden[dst]
    return Data(x=view.x[keep].float(), edge_index=relabel[view.edge_index[:, both]], y=view.y[keep],
                train_mask=view.train_mask[keep], num_missing=num_missing[keep], x_missing=x_missing[keep],
                keep=keep, x_all=view.x.float(), num_nodes=keep.numel())


def choose_hidden(view, ratio: float, seed: int) -> torch.Tensor:
    """round(ratio · n) nodes drawn among those that are neither training nor test nodes."""
    candidates = (~view.train_mask & ~view.test_mask).nonzero().view(-1).cpu()
    k = min(int(round(ratio * view.num_nodes)), candidates.numel())
    g = torch.Generator().manual_seed(seed)
    return candidates[torch.randperm(candidates.numel(), generator=g)[:k]].sort().values.to(view.x.device)


@dataclass
class NeighGenClient(ClientState):
    """A client while NeighGen trains: its model is NeighGen, beside it the classifier it trains with."""
    classifier: nn.Module | None = None
    incoming: dict | None = None       # the other clients' summed fGen gradients of the cross term, this epoch


def local_losses(state, p: FedSagePlusParams, seed: int) -> dict[str, torch.Tensor] | None:
    """NeighGen's own losses on the client's kept training nodes (None when it has none)."""
    from torch_geometric.data import Data

    g, gen = state.view, state.model
    t = g.train_mask.nonzero().view(-1)
    if t.numel() == 0:
        return None
    torch.manual_seed(seed)                                       # dropout
    # the classifier term needs every kept node's generated neighbours; otherwise only the training nodes'
    num, feats = gen(g.x, g.edge_index, torch.Generator().manual_seed(seed), None if p.cls_weight > 0 else t)
    k = counts(num, p.num_pred, p.count_rounding)
    num_t, k_t, feats_t = (num[t], k[t], feats[t]) if p.cls_weight > 0 else (num, k, feats)
    out = {"num": nn.functional.smooth_l1_loss(num_t, g.num_missing[t].float()),
           "feat": greedy_feature_loss(feats_t, k_t, g.x_missing[t], g.num_missing[t], p.num_pred)}
    if p.cls_weight > 0:
        x, ei = mend(g.x, g.edge_index, torch.arange(g.num_nodes, device=g.x.device), k, feats)
        logits = state.classifier(Data(x=x, edge_index=ei))[t]
        out["cls"] = nn.functional.cross_entropy(logits, g.y[t])
    else:
        out["cls"] = torch.zeros((), device=g.x.device)
    out["total"] = p.num_weight * out["num"] + p.feat_weight * out["feat"] + p.cls_weight * out["cls"]
    return out


def local_gen_step(state, p: FedSagePlusParams, seed: int) -> dict[str, float]:
    """One full-batch step of the whole NeighGen and the auxiliary classifier (local phase)."""
    state.model.train()
    state.classifier.train()
    state.optimizer.zero_grad()
    losses = local_losses(state, p, seed + state.cid)
    if losses is None:
        return {}
    losses["total"].backward()
    state.optimizer.step()
    return {k: float(v.detach()) for k, v in losses.items()}


def cross_gradient(state, weights: dict, p: FedSagePlusParams, seed: int, num_clients: int) -> dict:
    """At client j (``state``): run another client's NeighGen (``weights``) on j's impaired graph and return
    the gradient, w.r.t. that NeighGen's fGen parameters, of cross_weight/M times the distance of its
    generated features to the nearest real feature rows of j. Nothing but this gradient leaves j."""
    from torch.func import functional_call

    g, gen = state.view, state.model
    t = g.train_mask.nonzero().view(-1)
    names = fgen_names(gen)
    params = {k: v.detach().to(g.x.device).requires_grad_(k in names) for k, v in weights.items()}
    if t.numel() == 0:
        return {k: zero_gradient(params[k]) for k in names}
    gen.train()
    torch.manual_seed(seed + state.cid)
    num, feats = functional_call(gen, params, (g.x, g.edge_index, torch.Generator().manual_seed(seed + state.cid), t))
    k = counts(num, p.num_pred, p.count_rounding)
    if not bool((k > 0).any()):
        # no node of j gets a generated vector (the counts are piecewise constant in the weights): the
        # loss is 0 near these weights and so is its gradient, without a backward pass
        return {k: zero_gradient(params[k]) for k in names}
    loss = p.cross_weight * nearest_feature_loss(feats, k, g.x_all, p.num_pred) / num_clients
    grads = torch.autograd.grad(loss, [params[k] for k in names], allow_unused=True)
    return {k: (gr if gr is not None else torch.zeros_like(params[k])).detach().cpu() for k, gr in zip(names, grads)}


def zero_gradient(param: torch.Tensor) -> torch.Tensor:
    """A zero of ``param``'s shape on the CPU that allocates nothing (an expanded scalar, read-only): the
    cross-term gradient of a client where nothing was generated (fGen's last layer alone is num_pred·F·2048
    floats, and a fresh buffer of that size costs more than the step)."""
    return torch.zeros((), dtype=param.dtype).expand(param.shape)


def fed_gen_step(state, p: FedSagePlusParams, seed: int, num_clients: int) -> dict[str, float]:
    """One fGen step of the federated phase: own losses / M plus the summed gradients of the other clients'
    cross terms (``state.incoming``, None when nothing was exchanged)."""
    state.model.train()
    state.classifier.train()
    state.optimizer.zero_grad()
    incoming, state.incoming = state.incoming, None
    losses = local_losses(state, p, seed + state.cid)
    if losses is not None:
        (losses["total"] / num_clients).backward()
    if incoming is not None:
        for k, w in state.model.named_parameters():
            if k in incoming:
                g = incoming[k].to(w.device)     # popped above: no one else holds it, no copy needed
                w.grad = g if w.grad is None else w.grad.add_(g)
    state.optimizer.step()
    return {} if losses is None else {k: float(v.detach()) for k, v in losses.items()}


def adam(params, p: FedSagePlusParams, device: torch.device) -> torch.optim.Optimizer:
    """NeighGen's Adam; fused where torch has it (fGen's last layer has num_pred·F·2048 weights)."""
    fused = True if device.type in ("cpu", "cuda") else None
    return torch.optim.Adam(params, lr=p.gen_lr, weight_decay=p.gen_weight_decay, fused=fused)


def generator_weights(state) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu().clone() for k, v in state.model.state_dict().items()}


def mended_view(state, full_view, p: FedSagePlusParams, seed: int):
    """The client's real subgraph with the generated neighbours of its kept nodes attached. The new nodes
    have label 0 and no split mask, so they are neither trained on nor evaluated."""
    from torch_geometric.data import Data

    g, gen = state.view, state.model
    gen.eval()
    with torch.no_grad():
        num, feats = gen(g.x, g.edge_index, torch.Generator().manual_seed(seed + state.cid))
        k = counts(num, p.num_pred, p.count_rounding)
        x, ei = mend(full_view.x, full_view.edge_index, g.keep, k, feats)
    n, extra = full_view.num_nodes, int(k.sum())
    pad = torch.zeros(extra, dtype=torch.bool, device=x.device)
    view = Data(x=x, edge_index=ei, y=torch.cat([full_view.y, full_view.y.new_zeros(extra)]), num_nodes=n + extra)
    for m in ("train_mask", "val_mask", "test_mask"):
        setattr(view, m, torch.cat([getattr(full_view, m), pad]))
    view.num_owned = n
    return view


# ---- the algorithm --------------------------------------------------------------------------------

@ALGORITHMS.register("fedsage_plus", params=FedSagePlusParams, tasks=("node",))
class FedSagePlus(FedAvg):
    requires_model = ("sage", "FedSage+ trains GraphSAGE classifiers on the mended subgraphs")
    objective = None               # NeighGen's phase is client work of its own
    messages = {**FedAvg.messages,
                "neighgen_weights": Message("up"),      # client i's NeighGen parameters, to be relayed
                "peer_neighgen": Message("down"),       # ... to every other client j
                "fgen_gradient": Message("up"),         # j's cross-term gradient w.r.t. fGen_i's parameters
                "fgen_gradient_sum": Message("down")}   # the sum over j, to client i

    def setup(self) -> None:
        p, ctx = self.params, self.ctx
        check_client_size(ctx, p.max_client_nodes, "FedSage+ generates num_pred feature vectors per node on the fly "
                          "(a mended graph of up to (1 + num_pred)·n nodes, full-batch NeighGen, M·(M-1) generator "
                          "passes per epoch) and does not scale to this data")
        full = super().make_views(include_cross=False)
        self.mended = self.train_neighgen(full)
        added = [int(v.num_nodes - v.num_owned) for v in self.mended.values()]
        ctx.log.info("fedsage_plus: generated neighbours per client %s", added)
        ctx.record("fedsage_mended", {"generated_nodes": added})
        super().setup()      # FedAvg of the GraphSAGE classifier on make_views() = the mended subgraphs

    def make_views(self, include_cross: bool = False):
        return self.mended

    def train_neighgen(self, full: dict) -> dict:
        """Phase 1, one client after the other: its local NeighGen epochs, its federated fGen epochs with the
        other clients' cross-term gradients, then its mended subgraph; its NeighGen, classifier and optimiser
        are freed before the next client's are built. A client's NeighGen never depends on another client's
        NeighGen (the cross term at client j runs client i's weights on j's impaired graph only) and every
        random draw is seeded per (phase, epoch, client), so this order gives the same NeighGens as running
        the clients side by side, while only one NeighGen with its Adam state (num_pred·F·2048 weights in
        fGen's last layer, three copies) is alive at a time. Returns the mended views by client id."""
        p, ctx = self.params, self.ctx
        template = NeighGen(ctx.in_dim, p).to(ctx.device)     # the module others' weights run in (functional_call)
        template.requires_grad_(False)
        peers = [ClientState(c.cid, impaired_graph(full[c.cid], choose_hidden(full[c.cid], p.hide_ratio,
                                                                               ctx.seed * 7919 + c.cid), p.num_pred),
                             template, None, "node") for c in ctx.clients]
        m = len(peers)
        local_rows = [[] for _ in range(p.local_gen_epochs)]
        fed_rows = [[] for _ in range(p.fed_gen_epochs)]
        mended = {}
        for peer in peers:
            classifier = ctx.build_model()
            torch.manual_seed(ctx.seed * 7919 + peer.cid)
            gen = NeighGen(ctx.in_dim, p).to(ctx.device)
            opt = adam(list(gen.parameters()) + list(classifier.parameters()), p, ctx.device)
            s = NeighGenClient(peer.cid, peer.view, gen, opt, "node", classifier=classifier)
            for e in range(p.local_gen_epochs):
                local_rows[e].append(ctx.executor.map(local_gen_step, [s], p, self._seed(1, e))[0])
            # federated phase: only fGen learns (the authors freeze the rest)
            s.model.requires_grad_(False)
            s.classifier.requires_grad_(False)
            s.model.fgen.requires_grad_(True)
            s.model.zero_grad(set_to_none=True)
            s.classifier.zero_grad(set_to_none=True)
            s.optimizer = adam(s.model.fgen.parameters(), p, ctx.device)
            for e in range(p.fed_gen_epochs):
                if p.cross_weight > 0 and m > 1:
                    self.exchange_gradients(s, [o for o in peers if o.cid != s.cid], self._seed(2, e))
                fed_rows[e].append(ctx.executor.map(fed_gen_step, [s], p, self._seed(3, e), m)[0])
            mended[peer.cid] = ctx.executor.map(mended_view_of, [s], full, p, ctx.seed)[0]
            del s, gen, classifier, opt
        for e, rows in enumerate(local_rows):
            self._log_epoch("local", e, rows)
        for e, rows in enumerate(fed_rows):
            self._log_epoch("federated", e, rows)
        return mended

    def exchange_gradients(self, s: ClientState, others: list[ClientState], seed: int) -> None:
        """Client s's NeighGen goes to the others through the server; they return fGen gradients of the
        cross term; the server sends s their sum. Only parameters and gradients travel. In-process, the
        others run one at a time and their gradients are summed as they arrive (each is num_pred·F·2048
        floats); other executors get them all at once, to run them side by side."""
        ch, p, m = self.ctx.channel, self.params, len(others) + 1
        w = ch.send("neighgen_weights", generator_weights(s), src=s.cid, dst="server", round=0)
        w = ch.broadcast("peer_neighgen", w, [o.cid for o in others], 0)
        step = 1 if isinstance(self.ctx.executor, InProcessExecutor) else len(others)
        total, first = None, None
        for i in range(0, len(others), step):
            chunk = others[i:i + step]
            grads = self.ctx.executor.map(cross_gradient, chunk, w, p, seed + 1009 * s.cid, m)
            for o, g in zip(chunk, grads):
                g = ch.send("fgen_gradient", g, src=o.cid, dst="server", round=0)
                # the sum goes into a new buffer (a sent message is never changed), made by the first
                # addition: each fresh fGen-sized buffer costs more than the addition itself
                if first is None and total is None:
                    first = g
                elif total is None:
                    total, first = {k: first[k] + v for k, v in g.items()}, None
                else:
                    for k, v in g.items():
                        total[k].add_(v)
            del grads
        if total is None:
            total = {k: v.clone() for k, v in first.items()}
        s.incoming = ch.send("fgen_gradient_sum", total, src="server", dst=s.cid, round=0)

    def _seed(self, phase: int, epoch: int) -> int:
        return self.ctx.seed * 1_000_003 + phase * 100_003 + epoch * 1009

    def _log_epoch(self, phase: str, epoch: int, results: list[dict]) -> None:
        rows = [r for r in results if r]
        mean = {k: sum(r[k] for r in rows) / len(rows) for k in ("num", "feat", "cls", "total")} if rows else {}
        self.ctx.record("fedsage_neighgen", {"phase": phase, "epoch": epoch,
                                             **{f"loss_{k}": v for k, v in mean.items()}})
        if epoch == 0 or (epoch + 1) % 5 == 0:
            self.ctx.log.info("fedsage_plus NeighGen %s epoch %d: %s", phase, epoch + 1,
                              " ".join(f"{k} {v:.4f}" for k, v in mean.items()))


def mended_view_of(state, full: dict, p: FedSagePlusParams, seed: int):
    return mended_view(state, full[state.cid], p, seed)
