"""``executor=batched``: the clients' local steps as one batched computation instead of a loop.

When a round's clients run the client runtime's ``local_update`` (fgx/federation/client.py) under an
objective that has a batched form (``Objective.unbatched`` is None: the plain objective, which adds nothing,
or one whose ``batched_term`` gives every client's term from the stacked parameters) on the GCN or
GraphSAGE backbone, the executor asks that objective for it and the clients become one block-diagonal
graph: client i's nodes are rows [i·n, i·n + n_i) of a padded node table (n: the largest client), its
edges keep to its block, and its parameters are row i of stacked per-client copies ([C, ...] tensors). A layer is one
sparse product over the block-diagonal adjacency and one ``bmm`` with the stacked weights, so each
local step of all clients costs one graph of their total size, not C small ones.

Each client's update stays its own. The loss is the sum of the clients' own mean losses, whose
gradient is block-separable: one backward pass gives row i exactly client i's gradient. The optimiser
keeps per-client state (Adam's moments and step count per row; read from and written back to each
client's own optimiser), dropout masks come from each client's own seeded generator in the order its
own loop would draw them, and mini-batches from its own ``round_seed + cid`` generator. So the
per-client models, optimiser states, updates and losses equal the per-client loop's (to float
rounding: tests/test_client_batching.py). Messages are unchanged: every client's update still goes
up the channel on its own (one upload per client, same kinds), so every privacy mechanism sees
per-client updates as before.

``client_batching: auto`` batches the calls it can and runs any other as executor=local does (a
sampled step: ``algorithm.fanouts``; another model; client work other than ``local_update``; an objective
without a batched form); ``on`` refuses those, before work starts where the algorithm declares it
(``Algorithm.objective``). The per-client loop (``executor=local``) stays the reference. Nothing here
knows an algorithm: what a method adds to local training comes from its objective."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from fgx.config import ConfigError, spec
from fgx.federation.client import ClientUpdate, LocalLoss, Objective, local_update, num_train_items, state_delta, \
    steps_per_round
from fgx.federation.executor import InProcessExecutor
from fgx.registry import EXECUTORS

MODELS = ("gcn", "sage")


@dataclass
class BatchedParams:
    client_batching: str = field(default="auto", metadata=spec(
        choices=["auto", "on"], help="auto: batch the clients' local steps where the algorithm and model allow "
                                     "it, else one client after another; on: refuse a run that cannot be batched"))
    group_nodes: int = field(default=16384, metadata=spec(
        min=1, help="clients are batched in groups of similar size with at most this many (padded) nodes"))


def config_refusal(v) -> str | None:
    """Why a validated config cannot run batched (None: it can), as far as the algorithm declares it."""
    algo, name = v.entries["algorithm"].obj, v.names["algorithm"]
    if algo.objective is None:
        return f"algorithm '{name}' runs client work of its own, not the client runtime's local_update"
    if algo.objective.unbatched is not None:
        return (f"algorithm '{name}''s objective {algo.objective.__name__} has no batched form: "
                f"{algo.objective.unbatched}")
    if v.names["model"] not in MODELS:
        return f"model '{v.names['model']}' is not one of {list(MODELS)}"
    if getattr(v.params["algorithm"], "fanouts", None):
        return "algorithm.fanouts samples a subgraph per client and step; the batched step runs whole client graphs"
    return None


@EXECUTORS.register("batched", params=BatchedParams)
class BatchedExecutor(InProcessExecutor):
    """executor=local's loop, with the calls of ``local_update`` under an objective with a batched form batched."""

    def __init__(self, params=None):
        super().__init__(params)
        self.blocks: dict = {}    # the latest batch of views (a round's clients are the same views every round)

    def shutdown(self) -> None:
        self.blocks.clear()

    @classmethod
    def check_config(cls, params: BatchedParams, validated) -> None:
        why = config_refusal(validated) if params.client_batching == "on" else None
        if why is not None:
            raise ConfigError("executor.client_batching", "on", f"'auto' or executor=local ({why})")

    def map(self, fn, items: list, *args):
        why = call_refusal(fn, items, args)
        if why is None:
            return batched_local_update(items, self.client_seeds(items), *args, blocks=self.blocks,
                                        group_nodes=self.params.group_nodes)
        if self.params.client_batching == "on":
            raise RuntimeError(f"executor.client_batching=on, but this call cannot be batched: {why}")
        return super().map(fn, items, *args)


def call_refusal(fn, states: list, args: tuple) -> str | None:
    """Why this ``map`` call cannot run batched (None: it can): only ``local_update`` has a batched form,
    and only under an objective that has one."""
    if fn is not local_update:
        return f"{fn.__qualname__} is client work of the algorithm's own (only local_update has a batched form)"
    _, p, _, objective = args
    if objective.unbatched is not None:
        return f"the objective {type(objective).__name__} has no batched form: {objective.unbatched}"
    return refusal(states, p)


def refusal(states: list, p) -> str | None:
    """Why these client states cannot train batched (None: they can)."""
    from fgx.models.gcn import GCN
    from fgx.models.sage import SAGE

    if getattr(p, "fanouts", None):
        return "sampled steps (algorithm.fanouts)"
    for s in states:
        if type(s.model) not in (GCN, SAGE) or s.task != "node":
            return f"client {s.cid}'s model is a {type(s.model).__name__} on the {s.task} task (GCN/SAGE node models only)"
        if s.view.y.dim() != 1:
            return "labels that are not one class per node"
        if isinstance(s.model, SAGE) and any(c.aggr != "mean" or not c.root_weight or c.normalize or c.project
                                             for c in s.model.convs):
            return "a SAGEConv other than mean aggregation with a root weight"
        groups = s.optimizer.param_groups
        if len(groups) != 1 or type(s.optimizer) not in (torch.optim.Adam, torch.optim.SGD):
            return "an optimiser other than make_optimizer's Adam or SGD over one parameter group"
        g = groups[0]
        if g.get("amsgrad") or g.get("maximize") or g.get("decoupled_weight_decay") or g.get("momentum", 0) \
                or g.get("nesterov"):
            return "optimiser options beyond lr and weight decay"
    return None


# -- the block-diagonal batch ---------------------------------------------------------------------

class Block:
    """C client views as one padded, block-diagonal graph: client i owns rows [i·n, i·n + n_i)."""

    def __init__(self, views: list, device):
        from fgx.tasks import targets

        sizes = [int(v.num_nodes) for v in views]
        self.C, self.n, self.sizes = len(views), max(sizes), sizes
        starts = [i * self.n for i in range(self.C)]
        # each client's training rows in the order its own loss sees them (out[mask]: ascending node index)
        self.train_rows = [targets(v, "node", "train")[0].nonzero().view(-1).to(device) + s
                           for v, s in zip(views, starts)]
        self.views, self.device = views, device
        if self.holds_view(views, device):
            self.edge_index, self.y = views[0].edge_index, views[0].y
            return
        real = torch.cat([torch.arange(s, s + k) for s, k in zip(starts, sizes)])
        self.edge_index = torch.cat([v.edge_index.to(device) + s for v, s in zip(views, starts)], 1)
        self.y = torch.zeros(self.C * self.n, dtype=torch.long, device=device)
        self.y[real.to(device)] = torch.cat([v.y for v in views]).to(device)

    def features(self) -> torch.Tensor:
        """The padded feature table [C·n, F], built from the views for one call of train_group and not kept
        with the batch: kept between rounds, the tables of 1,000 clients were a second copy of every
        client's features (256 MB at 1M nodes, issue 69); building one costs a copy per round."""
        views = self.views
        if self.holds_view(views, self.device):
            return views[0].x
        x = torch.zeros(self.C * self.n, views[0].x.size(1), dtype=views[0].x.dtype, device=self.device)
        for i, v in enumerate(views):
            x[i * self.n:i * self.n + self.sizes[i]] = v.x
        return x

    @staticmethod
    def holds_view(views: list, device) -> bool:
        """One client (larger than group_nodes) whose view is the padded table as it is: the batch uses the
        view's own tensors, not copies, and its adjacency is the one the view's evaluation builds
        (fgx.models.sparse keeps one per edge_index tensor); copies were 0.5 GB of a one-step round's peak
        at 1M nodes with 10 clients (issue 69)."""
        v = views[0]
        return len(views) == 1 and v.x.device == v.edge_index.device == v.y.device == device and v.y.dtype == torch.long

    def bmm(self, h: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """Row block i of h times client i's ``weight[i]``ᵀ (F.linear per client)."""
        return torch.bmm(h.view(self.C, self.n, -1), weight.transpose(1, 2)).reshape(self.C * self.n, -1)

    def add_bias(self, h: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return (h.view(self.C, self.n, -1) + bias[:, None, :]).reshape(self.C * self.n, -1)


def forward(model, P: dict[str, torch.Tensor], blk: Block, drop, x: torch.Tensor) -> torch.Tensor:
    """What ``model.forward`` (fgx.models.gcn / sage) computes, for every client at once with its own
    parameters (``P``: name -> [C, ...]) on the padded features ``x`` (``blk.features()``); ``drop(h)`` is each
    client's dropout."""
    from fgx.models import sparse
    from fgx.models.sage import SAGE

    h = x
    N = blk.C * blk.n
    sage = isinstance(model, SAGE)
    adj = sparse.mean_adjacency(blk.edge_index, N) if sage else sparse.gcn_adjacency(blk.edge_index, N)
    for i in range(model.num_layers):
        if i > 0 or model.input_dropout:
            h = drop(h)
        pre = f"convs.{i}."
        if sage:   # lin_l(mean of in-neighbours) + lin_r(h), as fgx.models.sage.sage_layer
            out = blk.add_bias(sparse.propagate(adj, blk.bmm(h, P[pre + "lin_l.weight"])), P[pre + "lin_l.bias"])
            out = out + blk.bmm(h, P[pre + "lin_r.weight"])
        else:      # Â (h Wᵀ) + b, as fgx.models.gcn.GCN.layer
            out = sparse.propagate(adj, blk.bmm(h, P[pre + "lin.weight"]))
            if pre + "bias" in P:
                out = blk.add_bias(out, P[pre + "bias"])
        h = model.activate(i, out)
    if model.classifier is None:
        return h
    return blk.add_bias(blk.bmm(drop(h), P["classifier.weight"]), P["classifier.bias"])


class Dropout:
    """Each client's inverted dropout (fgx.models.base.dropout) with uniforms from its own generator, seeded
    as executor=local seeds the client's global generator, so every mask equals the one its loop draws."""

    def __init__(self, p: float, blk: Block, seeds: list[int]):
        self.p, self.blk = p, blk
        self.gens = [torch.Generator().manual_seed(s) for s in seeds]
        self.active = list(range(blk.C))

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        p, blk = self.p, self.blk
        if p == 0.0:
            return h
        if p >= 1.0:
            return h * 0.0
        u = torch.empty(h.shape)   # rows of padding and of clients not stepping: any mask (their outputs are unused)
        for i in self.active:
            torch.rand(blk.sizes[i], h.size(1), generator=self.gens[i], out=u[i * blk.n:i * blk.n + blk.sizes[i]])
        return h * (u.to(h.device) >= p) * (1.0 / (1.0 - p))


class StackedParameters:
    """The clients' parameters as one [C, D] table (row i: client i's parameters, flattened in
    ``named_parameters`` order; ``views`` gives each by name as [C, ...]), stepped by the clients' own Adam
    or SGD with per-client state read from and written back to each client's optimiser.

    The update is written out by hand (torch.optim's Adam/SGD formulas over rows): torch.optim.Adam keeps
    one step count per tensor, and the clients of a batch may have taken different numbers of steps
    (client sampling, local_epochs), so bias correction needs a step count per row."""

    def __init__(self, states: list):
        model = states[0].model
        self.names = [n for n, _ in model.named_parameters()]
        self.shapes = [w.shape for _, w in model.named_parameters()]
        self.sizes = [w.numel() for _, w in model.named_parameters()]
        self.params = [[w for _, w in s.model.named_parameters()] for s in states]
        self.flat = torch.stack([torch.cat([w.detach().reshape(-1) for w in ws]) for ws in self.params])
        self.flat.requires_grad_(True)
        g = states[0].optimizer.param_groups[0]
        self.adam = isinstance(states[0].optimizer, torch.optim.Adam)
        self.lr, self.wd = float(g["lr"]), float(g["weight_decay"])
        self.betas, self.eps = g.get("betas", (0.9, 0.999)), g.get("eps", 1e-8)
        self.optimizers = [s.optimizer for s in states]
        if self.adam:    # a client steps all its parameters together: one step count per client
            rows = [[o.state.get(w, {}) for w in ws] for o, ws in zip(self.optimizers, self.params)]
            self.steps = torch.tensor([float(r[0].get("step", 0.0)) for r in rows], dtype=torch.float64)
            zero = lambda k: torch.zeros(k, dtype=self.flat.dtype, device=self.flat.device)   # noqa: E731
            self.m, self.v = (torch.stack([torch.cat([st[key].reshape(-1) if key in st else zero(k)
                                                      for st, k in zip(r, self.sizes)]) for r in rows])
                              for key in ("exp_avg", "exp_avg_sq"))

    def views(self) -> dict[str, torch.Tensor]:
        C = self.flat.size(0)
        parts = self.flat.split(self.sizes, dim=1)
        return {n: w.reshape(C, *shape) for n, w, shape in zip(self.names, parts, self.shapes)}

    def step(self, active: torch.Tensor) -> None:
        """One step of the clients where ``active`` [C] is True; the others stay as they are."""
        w = self.flat
        with torch.no_grad():
            grad = w.grad if w.grad is not None else torch.zeros_like(w)
            w.grad = None
            if self.wd != 0:
                grad = grad.add(w, alpha=self.wd)
            everyone = bool(active.all())
            keep = active.view(-1, 1).to(w.device)
            if not self.adam:
                upd = self.lr * grad
                w.sub_(upd if everyone else torch.where(keep, upd, torch.zeros_like(upd)))
                return
            b1, b2 = self.betas
            m = self.m.lerp(grad, 1 - b1)
            v = self.v.mul(b2).addcmul_(grad, grad, value=1 - b2)
            self.m, self.v = (m, v) if everyone else (torch.where(keep, m, self.m), torch.where(keep, v, self.v))
            self.steps += active.double()
            t = self.steps.clamp(min=1)
            step_size = (self.lr / (1 - b1 ** t)).to(w.dtype).view(-1, 1).to(w.device)
            bc2_sqrt = (1 - b2 ** t).sqrt().to(w.dtype).view(-1, 1).to(w.device)
            upd = self.m.div(self.v.sqrt().div_(bc2_sqrt).add_(self.eps)).mul_(step_size)
            w.sub_(upd if everyone else torch.where(keep, upd, torch.zeros_like(upd)))

    def write_back(self) -> None:
        """Each client's parameters and optimiser state, as its own loop would have left them."""
        with torch.no_grad():
            for i, (ws, opt) in enumerate(zip(self.params, self.optimizers)):
                row = self.flat[i].split(self.sizes)
                for w, new in zip(ws, row):
                    w.copy_(new.view_as(w))
                if not self.adam or float(self.steps[i]) == 0:
                    continue
                fused = bool(opt.defaults.get("fused"))
                for w, m, v in zip(ws, self.m[i].split(self.sizes), self.v[i].split(self.sizes)):
                    opt.state[w] = {"step": torch.tensor(float(self.steps[i]), dtype=torch.float32,
                                                         device=w.device if fused else "cpu"),
                                    "exp_avg": m.view_as(w).clone(), "exp_avg_sq": v.view_as(w).clone()}


def loss_coefficients(blk: Block, rows: list[torch.Tensor], weights: list) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, coefficients) such that Σ coef·CE(row) summed per client is each client's own (class-weighted)
    mean cross-entropy over ``rows[i]`` (nn.functional.cross_entropy's weighted mean)."""
    coefs = []
    for r, w in zip(rows, weights):
        c = torch.ones(r.numel(), device=r.device) if w is None else w[blk.y[r]]
        coefs.append(c / c.sum() if r.numel() else c)
    return torch.cat(rows), torch.cat(coefs)


def train_batched(states: list, seeds: list[int], p, round_seed: int, objective: Objective,
                  blocks: dict | None = None, group_nodes: int | None = None) -> list[LocalLoss]:
    """fgx.federation.client.local_training for every client of ``states``, in groups of clients of similar
    size with at most ``group_nodes`` padded nodes each (one client larger than that: a group of its own),
    each group one batched computation; returns each client's mean losses (NaN for a client without
    training items, which trains as little as in its own loop). ``blocks`` keeps the groups' batches
    between calls."""
    nan = float("nan")
    losses = [LocalLoss(nan, nan, nan)] * len(states)
    # by size, so that a group pads little; the order of clients changes nothing (each one's step is its own)
    idx = sorted((i for i, s in enumerate(states) if num_train_items(s) > 0), key=lambda i: states[i].view.num_nodes)
    groups, limit = [], group_nodes or float("inf")
    for i in idx:
        if groups and (len(groups[-1]) + 1) * states[i].view.num_nodes <= limit:
            groups[-1].append(i)
        else:
            groups.append([i])
    kept = {}
    for g in groups:
        sts = [states[i] for i in g]
        # the same views with unchanged tensors (in-place versions) are the same batch
        key = tuple((s.cid, id(s.view), s.view.x._version, s.view.edge_index._version, s.view.y._version)
                    for s in sts)
        if blocks is not None and key in blocks:
            kept[key] = blocks[key]
        else:
            views = [s.view for s in sts]     # kept with the batch: their ids cannot be reused while it is
            kept[key] = (views, Block(views, sts[0].view.x.device))
        for i, loss in zip(g, train_group(kept[key][1], sts, [seeds[i] for i in g], p, round_seed, objective)):
            losses[i] = loss
    if blocks is not None:
        blocks.clear()
        blocks.update(kept)
    return losses


def train_group(blk: Block, sts: list, seeds: list[int], p, round_seed: int, objective: Objective) -> list[LocalLoss]:
    """One group's local steps as one batched computation (``blk`` holds its clients' views)."""
    model = sts[0].model
    for s in sts:
        s.model.train()
    opt = StackedParameters(sts)
    drop = Dropout(model.dropout, blk, seeds)
    steps = torch.tensor([steps_per_round(s, p) for s in sts])
    batch_gens = [torch.Generator().manual_seed(round_seed + s.cid) for s in sts]
    weights = [s.loss_weight for s in sts]
    n_train = [r.numel() for r in blk.train_rows]
    client_of = torch.repeat_interleave(torch.arange(blk.C), torch.tensor(n_train))
    full = loss_coefficients(blk, blk.train_rows, weights)
    x = blk.features()
    totals = torch.zeros(blk.C, dtype=torch.float64)
    ce_totals = torch.zeros(blk.C, dtype=torch.float64)
    for step in range(int(steps.max())):
        active = steps > step
        drop.active = active.nonzero().view(-1).tolist()
        if p.batch_size is not None and any(p.batch_size < k for k in n_train):
            rows = [blk.train_rows[i][torch.randperm(k, generator=batch_gens[i])[:p.batch_size].to(blk.device)]
                    if active[i] and p.batch_size < k else blk.train_rows[i] for i, k in enumerate(n_train)]
            rows_all, coef = loss_coefficients(blk, rows, weights)
            owner = torch.repeat_interleave(torch.arange(blk.C), torch.tensor([r.numel() for r in rows]))
        else:
            (rows_all, coef), owner = full, client_of
        coef = coef * active[owner].to(coef.dtype).to(coef.device)
        P = opt.views()
        out = forward(model, P, blk, drop, x)
        ce = nn.functional.cross_entropy(out[rows_all], blk.y[rows_all], reduction="none")
        per_client = per_client_ce = torch.zeros(blk.C, device=ce.device).index_add(0, owner.to(ce.device), coef * ce)
        term = objective.batched_term(P)     # [C]: the method's term of each client (None: none)
        if term is not None:
            per_client = per_client + term
        per_client.sum().backward()
        opt.step(active)
        totals += torch.where(active, per_client.detach().double().cpu(), torch.zeros_like(totals))
        ce_totals += torch.where(active, per_client_ce.detach().double().cpu(), torch.zeros_like(totals))
    opt.write_back()
    mean, ce_mean = (totals / steps).tolist(), (ce_totals / steps).tolist()
    return [LocalLoss(l, c, l - c) for l, c in zip(mean, ce_mean)]


# -- the batched form of the client runtime's local_update ---------------------------------------------

def batched_local_update(states: list, seeds: list[int], weights: dict | None, p, round_seed: int,
                         objective: Objective, **batching) -> list[ClientUpdate]:
    """fgx.federation.client.local_update for every client at once: each client's objective started, the
    start weights loaded (part of the model: under each client's own other layers; None: each keeps its own), the
    local steps batched with the objective's batched term, and each client's update."""
    own = [objective.start(s, weights) for s in states]
    if weights is not None:
        for s in states:
            s.model.load_state_dict(weights, strict=False)
    losses = train_batched(states, seeds, p, round_seed, objective, **batching)
    out = []
    for s, o, loss in zip(states, own, losses):
        delta = state_delta(s.model.state_dict(), weights) if weights is not None else None
        out.append(ClientUpdate(delta, loss, o.finish(s, delta)))
    return out
