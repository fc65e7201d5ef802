"""The federated protocol interface, plus the client-side training pieces most algorithms share.

An algorithm owns what clients do locally, what they send (declared in ``messages``) and how the
server combines it. The trainer calls ``setup()`` once, ``round(r)`` per round, ``predict(client)``
at evaluations, and ``state_dict()``/``load_state_dict()`` for checkpoints."""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from fgx import inference
from fgx.config import ConfigError, spec
from fgx.federation.channel import Message
from fgx.tasks import SPLITS, class_weights, local_view, split_mask, targets


@dataclass
class LocalTrainParams:
    lr: float = field(default=0.01, metadata=spec(gt=0.0))
    weight_decay: float = field(default=5e-4, metadata=spec(min=0.0))
    optimizer: str = field(default="adam", metadata=spec(choices=["adam", "sgd"]))
    local_steps: int = field(default=10, metadata=spec(min=1, help="gradient steps per round (K)"))
    local_epochs: int | None = field(default=None, metadata=spec(
        min=1, help="if set: passes over the training items per round (E), overriding local_steps"))
    batch_size: int | None = field(default=None, metadata=spec(min=1, help="training items per step; null: all"))
    class_weighted: bool | None = field(default=None, metadata=spec(
        help="class-weighted cross-entropy; null: on for edge tasks (imbalanced AML)"))
    class_weights: list[float] | None = field(default=None, metadata=spec(
        gt=0.0, help="explicit cross-entropy class weights (e.g. Multi-GNN's [1.0, 6.275]); overrides class_weighted"))
    fanouts: list[int] | None = field(default=None, metadata=spec(
        help="with batch_size: run each step on fgx's sampled L-hop subgraph of the seed batch "
             "(e.g. [10, 10]; -1 = all neighbours); null: the whole client graph"))


class Algorithm:
    messages: dict[str, Message] = {}
    # True where each client keeps its own model after its local step (``local_model_for``): what
    # ``eval_model=local`` scores
    has_local_models: bool = False
    # (model name, why) for a method built around one model (FedSage+ on GraphSAGE): check_config
    # refuses any other before work starts
    requires_model: tuple[str, str] | None = None

    def __init__(self, ctx):
        self.ctx = ctx
        self.params = ctx.params

    # -- protocol -------------------------------------------------------------------------
    def setup(self) -> None:
        raise NotImplementedError

    def round(self, r: int) -> dict[str, float]:
        raise NotImplementedError

    def model_for(self, client) -> nn.Module:
        """The model a client evaluates with."""
        raise NotImplementedError

    def local_model_for(self, client) -> nn.Module:
        """The client's model right after its latest local step (``eval_model=local``)."""
        raise NotImplementedError(f"{type(self).__name__} keeps no per-client model to score")

    def view_for(self, client):
        return self.views[client.cid]

    def predict(self, client, local: bool = False, splits=SPLITS, subset: int | None = None,
                batch_size: int | None = None) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """(scores, labels) of the client's items of each split in ``splits`` (at most ``subset`` of
        them, a fixed random choice; see eval_items). With sampler fanouts the items are scored in
        batches of ``batch_size`` on their sampled neighbourhoods, the way training saw the graph.
        ``local``: of the client's locally stepped model (``eval_model=local``)."""
        model = self.local_model_for(client) if local else self.model_for(client)
        view = self.view_for(client)
        model.eval()
        # the same items at every evaluation of an unchanged view: found once (a tenth of a Cora client's
        # evaluation otherwise)
        key = (client.cid, tuple(splits), subset)
        cache = self.__dict__.setdefault("_eval_items", {})
        if key not in cache or cache[key][0] is not view:
            cache[key] = (view, eval_items(view, self.ctx.info.task, splits, subset, self.ctx.seed, client.cid))
        items = cache[key][1]
        fanouts = getattr(self.params, "fanouts", None)
        batch = batch_size or getattr(self.params, "batch_size", None)
        with torch.no_grad():
            if fanouts and getattr(self.params, "batch_size", None):
                from fgx.sampler import NeighborSampler, sample_view
                samplers = self.__dict__.setdefault("_eval_samplers", {})
                if client.cid not in samplers:
                    samplers[client.cid] = NeighborSampler(view.edge_index.cpu(), view.num_nodes, fanouts)
                if inference.use_layerwise(self.ctx, model, subset):
                    # each layer once for all of the client's nodes, at most the training fanout of in-edges
                    # per node; ego IDs mark the scored edges (fgx.inference)
                    uniq, inv = torch.unique(torch.cat([ids for ids, _ in items.values()]), return_inverse=True)
                    keeps = inference.layer_edges(samplers[client.cid], fanouts, model.num_layers, self.ctx.seed)
                    return per_split(inference.forward(model, view, self.ctx.info.task, uniq,
                                                       inference.chunk_edges(self.ctx), keeps), inv, items)
                # edge models mark seed endpoints with ego IDs, so the whole-graph forward differs
                return score_items(view, self.ctx.info.task, items, samplers[client.cid], batch,
                                   lambda smp: model(sample_view(view, smp).to(view.x.device)),
                                   self.ctx.out_dim, self.ctx.seed)
            scores = self.score(client, model)
        return {split: (scores[ids].cpu(), y.cpu()) for split, (ids, y) in items.items()}

    def score(self, client, model: nn.Module) -> torch.Tensor:
        """Scores of every item of the client's view under ``model``: the one place an algorithm that
        scores its own way (FedGNN's expanded subgraph, AdaFGL's personalised step) changes ``predict``."""
        return model(self.view_for(client))

    def state_dict(self) -> dict:
        raise NotImplementedError

    def load_state_dict(self, state: dict) -> None:
        raise NotImplementedError

    @classmethod
    def reduces_to(cls, params, top) -> str | None:
        """The simpler method this configuration computes exactly, with the reason (a table refuses such a
        row: it cannot differ from that method's row); None when it is the method itself."""
        return None

    @classmethod
    def check_config(cls, params, validated) -> None:
        """Raise fgx.config.ConfigError for impossible combinations (called before any work); resolve
        ``null``/``auto`` params here. An algorithm with checks of its own calls this first."""
        if cls.requires_model is not None:
            require_model(validated, cls.requires_model[0], why=cls.requires_model[1])

    @classmethod
    def messages_for(cls, params) -> dict[str, Message]:
        """The message kinds a run with these params may send: all of ``messages`` unless an
        algorithm narrows it (e.g. a switch that turns a message off). The channel refuses any other
        kind, and the privacy coverage rule (fgx/privacy/base.py) asks a budget to cover these."""
        return cls.messages

    # -- shared client-side pieces --------------------------------------------------------
    def make_views(self, include_cross: bool = False) -> dict[int, Any]:
        task = self.ctx.info.task
        return {c.cid: local_view(c, task, include_cross).to(self.ctx.device) for c in self.ctx.clients}


def eval_items(view, task: str, splits=SPLITS, subset: int | None = None, seed: int = 0,
               cid: int = 0) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """{split: (item ids, labels)} of a client's labelled items (edges or nodes of ``view``). With
    ``subset``, at most that many per split, drawn at random once per (seed, client, split): the same
    items at every intermediate evaluation, so the curve compares like with like."""
    out = {}
    for k, split in enumerate(splits):
        mask, y = targets(view, task, split)
        ids = mask.nonzero().view(-1)
        if subset is not None and ids.numel() > subset:
            g = torch.Generator().manual_seed(seed * 1_000_003 + cid * 101 + k)
            pick = torch.randperm(ids.numel(), generator=g)[:subset].sort().values.to(ids.device)
            ids, y = ids[pick], y[pick]
        out[split] = (ids, y)
    return out


def score_items(view, task: str, items: dict, sampler, batch_size: int, forward, out_dim: int,
                seed: int, label: str = "evaluation") -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Scores of the requested items (eval_items), computed batch by batch on the sampler's
    neighbourhood of each batch; ``forward(sample)`` returns outputs with the seeds first."""
    from fgx.progress import tick

    g = torch.Generator().manual_seed(seed)
    want = torch.cat([ids for ids, _ in items.values()]) if items else torch.empty(0, dtype=torch.long)
    uniq, inv = torch.unique(want.cpu(), return_inverse=True)
    scores = torch.zeros(uniq.numel(), out_dim)
    chunks = uniq.split(batch_size)
    for b, chunk in enumerate(chunks):
        if task == "edge":
            smp = sampler.sample_edges(chunk, g)
            k = smp.num_seed_edges
            got = smp.edge_ids[:k]
        else:
            smp = sampler.sample_nodes(chunk, g)
            k = smp.num_seed_nodes
            got = smp.nodes[:k]
        # the sampler returns the seeds first, in its own order: put each score at its item's row
        rows = torch.searchsorted(uniq, got.cpu())
        scores[rows] = forward(smp)[:k].float().cpu()
        tick(label, b + 1, len(chunks))
    return per_split(scores, inv, items)


def per_split(scores: torch.Tensor, inv: torch.Tensor, items: dict) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """{split: (scores, labels)} from the scores of the unique items (``torch.unique(cat(ids), return_inverse)``)."""
    out, start, scores, inv = {}, 0, scores.float().cpu(), inv.cpu()
    for split, (ids, y) in items.items():
        out[split] = (scores[inv[start:start + ids.numel()]], y.cpu())
        start += ids.numel()
    return out


@dataclass
class ClientState:
    """What one client keeps between rounds: its view of the data, its model and optimiser."""
    cid: int
    view: Any
    model: nn.Module
    optimizer: torch.optim.Optimizer
    task: str
    loss_weight: torch.Tensor | None = None
    extra: dict = field(default_factory=dict)


def make_optimizer(model: nn.Module, p: LocalTrainParams) -> torch.optim.Optimizer:
    """The algorithm's optimiser over the model; a model with parameter groups of its own (UniFilter's
    combination coefficients have their own learning rate) says so through ``param_groups``."""
    groups = model.param_groups(p.lr, p.weight_decay) if hasattr(model, "param_groups") else \
        [{"params": list(model.parameters()), "lr": p.lr, "weight_decay": p.weight_decay}]
    if p.optimizer == "sgd":
        return torch.optim.SGD(groups)
    # fused: one kernel for all parameters instead of ~10 per tensor (a third of a Cora client's step)
    devices = {q.device.type for g in groups for q in g["params"]}
    fused = True if devices <= {"cpu", "cuda"} and all(q.is_floating_point() for g in groups for q in g["params"]) else None
    return torch.optim.Adam(groups, fused=fused)


def make_client_state(ctx, client, view, model: nn.Module) -> ClientState:
    p = ctx.params
    task = ctx.info.task
    weight = None
    weighted = p.class_weighted if p.class_weighted is not None else task == "edge"
    if getattr(p, "class_weights", None):
        if len(p.class_weights) != ctx.out_dim:
            raise ConfigError("algorithm.class_weights", p.class_weights, f"a list of {ctx.out_dim} weights")
        weight = torch.tensor(p.class_weights, dtype=torch.float, device=ctx.device)
    elif weighted:
        _, y = targets(view, task, "train")
        weight = class_weights(y.cpu(), ctx.out_dim).to(ctx.device)
    return ClientState(client.cid, view, model, make_optimizer(model, p), task, weight)


def num_train_items(state: ClientState) -> int:
    return int(split_mask(state.view, state.task, "train").sum())


def steps_per_round(state: ClientState, p: LocalTrainParams) -> int:
    if p.local_epochs is None:
        return p.local_steps
    n = num_train_items(state)
    per_epoch = 1 if p.batch_size is None else max(1, -(-n // p.batch_size))
    return p.local_epochs * per_epoch


def supervised_loss(state: ClientState, batch: torch.Tensor | None = None, extra_loss=None) -> torch.Tensor:
    """Cross-entropy on the client's training items (or the ``batch`` subset of them)."""
    mask, y = targets(state.view, state.task, "train")
    out = state.model(state.view)[mask]
    if batch is not None:
        out, y = out[batch], y[batch]
    loss = nn.functional.cross_entropy(out, y, weight=state.loss_weight)
    if extra_loss is not None:
        loss = loss + extra_loss(state)
    return loss


def sampled_loss(state: ClientState, seeds: torch.Tensor, fanouts: list[int], generator, extra_loss=None):
    """Cross-entropy on seed items, computed on fgx's sampled neighbourhood of the seeds only."""
    from fgx.sampler import NeighborSampler, sample_view

    view = state.view
    sampler = state.extra.get("sampler")
    if sampler is None:
        sampler = NeighborSampler(view.edge_index.cpu(), view.num_nodes, fanouts, direction="in")
        state.extra["sampler"] = sampler
    if state.task == "edge":
        sample = sampler.sample_edges(seeds.cpu(), generator)
        sub = sample_view(view, sample).to(view.x.device)
        out = state.model(sub)[: sample.num_seed_edges]
        y = sub.edge_y[: sample.num_seed_edges]
    else:
        sample = sampler.sample_nodes(seeds.cpu(), generator)
        sub = sample_view(view, sample).to(view.x.device)
        out = state.model(sub)[: sample.num_seed_nodes]
        y = sub.y[: sample.num_seed_nodes]
    loss = nn.functional.cross_entropy(out, y, weight=state.loss_weight)
    if extra_loss is not None:
        loss = loss + extra_loss(state)
    return loss


def train_steps(state: ClientState, steps: int, batch_size: int | None, generator: torch.Generator,
                extra_loss=None, fanouts: list[int] | None = None) -> float:
    """``steps`` optimiser steps on the client's training items; returns the mean loss. With
    ``fanouts`` and a batch size, each step runs on the sampled subgraph of its seed batch."""
    state.model.train()
    n = num_train_items(state)
    if n == 0:
        return float("nan")
    total = 0.0
    train_ids = None
    from fgx.progress import tick

    for step in range(steps):
        tick(f"client {state.cid} step", step + 1, steps)
        batch = None
        if batch_size is not None and batch_size < n:
            batch = torch.randperm(n, generator=generator)[:batch_size].to(state.view.x.device)
        state.optimizer.zero_grad()
        if fanouts and batch is not None:
            if train_ids is None:
                train_ids = targets(state.view, state.task, "train")[0].nonzero().view(-1)
            loss = sampled_loss(state, train_ids[batch], fanouts, generator, extra_loss)
        else:
            loss = supervised_loss(state, batch, extra_loss)
        loss.backward()
        state.optimizer.step()
        total += float(loss.detach())
    return total / steps


def round_seed(seed: int, r: int) -> int:
    """Seed of round ``r``'s client-side randomness (a client adds its id)."""
    return seed * 1_000_003 + r * 1009


def flat_params(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def weight_spread(W: torch.Tensor) -> dict[str, float]:
    """Diagnostic of a personalised aggregation: W [..., M, M] with rows summing to 1 over the M clients
    it averages; the smallest and largest weight as multiples of uniform (1/M). Both near 1: FedAvg in
    effect; and the mean effective number of clients a row averages."""
    W = torch.as_tensor(W, dtype=torch.float64)
    m = W.size(-1)
    return {"agg_weight_min_x_uniform": float(W.min()) * m, "agg_weight_max_x_uniform": float(W.max()) * m,
            # 1 / Σ_j W_ij², averaged over rows: M for a uniform average, 1 when each keeps its own
            "agg_effective_clients": float((1.0 / W.pow(2).sum(-1)).mean())}


# -- the round's bookkeeping: what every algorithm's server and client sides share -------------------
# A state is a model's state dict (or part of it). Floating tensors are averaged and moved by deltas;
# integer buffers (BN's num_batches_tracked) travel as they are.

def weighted_average(states: list[dict[str, torch.Tensor]], weights: list[float]) -> dict[str, torch.Tensor]:
    total = float(sum(weights))
    out = {}
    for k in states[0]:
        if not states[0][k].is_floating_point():
            out[k] = states[0][k].clone()   # integer buffers (e.g. BN's num_batches_tracked)
            continue
        out[k] = sum(s[k] * (w / total) for s, w in zip(states, weights))
    return out


def similarity_weights(embeddings: torch.Tensor, sizes: torch.Tensor, tau: float) -> torch.Tensor:
    """W_ij = exp(τ cos(e_i, e_j)) n_j / sum_k exp(τ cos(e_i, e_k)) n_k (rows sum to 1)."""
    e = nn.functional.normalize(embeddings, dim=1)
    logits = tau * (e @ e.t()) + torch.log(sizes.clamp(min=1).float())[None, :]
    return torch.softmax(logits, dim=1)      # = the normalised exp(τ S) n_j, computed stably


def personalised_average(states: list[dict[str, torch.Tensor]], row, own: int) -> dict[str, torch.Tensor]:
    """Σ_j row[j]·states[j] over the clients with a positive weight (one row of a personalised
    aggregation matrix, rows summing to 1); client ``own``'s integer buffers."""
    return {k: sum(row[j] * s[k] for j, s in enumerate(states) if row[j] > 0)
            if states[0][k].is_floating_point() else states[own][k] for k in states[0]}


def state_delta(new: dict[str, torch.Tensor], old: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """new - old over ``old``'s keys (what a client sends up after training from ``old``)."""
    return {k: (new[k] - old[k]) if new[k].is_floating_point() else new[k].clone() for k in old}


def apply_delta(state: dict[str, torch.Tensor], delta: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """state + delta over ``delta``'s keys."""
    return {k: (state[k] + v.to(state[k].device)) if v.is_floating_point() else v for k, v in delta.items()}


def zero_delta(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The update that changes nothing (a client without training items, an empty round)."""
    return {k: torch.zeros_like(v) if v.is_floating_point() else v.clone() for k, v in state.items()}


def add_delta(model: nn.Module, delta: dict[str, torch.Tensor]) -> None:
    """Move the model by ``delta`` (which may cover part of it: a method sharing some layers)."""
    model.load_state_dict(apply_delta(model.state_dict(), delta), strict=False)


def mean_loss(losses) -> float:
    """The mean of the clients' losses, leaving out NaN (a client without training items); NaN if none."""
    finite = [l for l in losses if l == l]
    return float(sum(finite) / len(finite)) if finite else float("nan")


def aggregation_weights(states: list, weighting: str, at_least_one: bool = False) -> list[float]:
    """Each client's weight in an average: its training items (``train_items``; with ``at_least_one``
    a client without any still counts once) or 1 (``uniform``). All zero: uniform."""
    if weighting == "uniform":
        return [1.0] * len(states)
    weights = [max(num_train_items(s), 1) if at_least_one else num_train_items(s) for s in states]
    return weights if sum(weights) > 0 else [1.0] * len(states)


def client_models_state(states: list) -> dict:
    """Checkpoint of per-client models and their optimisers: what a personalised method keeps."""
    return {"models": [s.model.state_dict() for s in states], "optimizers": [s.optimizer.state_dict() for s in states]}


def load_client_models(states: list, state: dict) -> None:
    for s, m, o in zip(states, state["models"], state["optimizers"]):
        s.model.load_state_dict(m)
        s.optimizer.load_state_dict(o)


def check_client_size(ctx, limit: int, why: str) -> None:
    """Refuse data whose largest client has more owned nodes than a full-batch method can hold."""
    big = max(ctx.clients, key=lambda c: c.num_owned)
    if big.num_owned > limit:
        raise ConfigError("algorithm.max_client_nodes", limit, f">= {big.num_owned} (client {big.cid}): {why}")


def require_model(validated, *names: str, why: str) -> None:
    """Refuse a run whose model is not one of ``names`` (a method built around one model)."""
    if validated.names.get("model") not in names:
        raise ConfigError("model", validated.names.get("model"), f"{' or '.join(names)} ({why})")


def copy_model(model: nn.Module) -> nn.Module:
    return copy.deepcopy(model)


class UploadedLocalModels:
    """``eval_model=local`` for methods whose server replaces each client's model with personalised
    weights at the end of a round (FedGTA, FedIIH): the client's model as its local step left it is
    the weights it uploaded, kept (``keep_uploads``) and loaded into a scratch copy when scored."""
    has_local_models = True

    def keep_uploads(self, weights: list[dict[str, torch.Tensor]]) -> None:
        self._uploads = weights

    def local_model_for(self, client) -> nn.Module:
        uploads = getattr(self, "_uploads", None)
        if uploads is None:                      # before the first round (or right after a resume)
            return self.model_for(client)
        model = self.model_for(client)
        scratch = self.__dict__.setdefault("_scratch", {}).setdefault(client.cid, copy_model(model))
        scratch.load_state_dict({k: v for k, v in uploads[client.cid].items() if k in model.state_dict()})
        return scratch
