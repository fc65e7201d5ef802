"""The client runtime: what every method's client does the same way.

A client keeps a :class:`ClientState` (its view of the data, its model and optimiser, and any state a
method adds by subclassing it). A round's work on a client is :func:`local_update`: load the weights the
server sent, run :func:`local_training` (the one local-training loop: ``steps_per_round`` optimiser steps
on cross-entropy over the client's training items, whole-graph or on sampled neighbourhoods) and send
``state_delta``. A method changes local training only through its :class:`Objective` (an extra loss
term, a hook between backward and the optimiser step, what it keeps or sends after training, its
batched form), never through string keys.

Everything here is module-level and picklable: an executor (in-process, batched, Ray) ships
``local_update`` and its arguments to where the client lives. Nothing here knows a method by name."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from fgx.config import ConfigError, spec
from fgx.federation.stratified import stratified_batches
from fgx.tasks import class_weights, split_mask, targets


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
    positive_share: float | None = field(default=None, metadata=spec(
        gt=0.0, max=0.5, help="binary tasks with batches: this share of every batch from the client's rarest "
                             "class, loss weights corrected to keep the objective (fgx/federation/stratified.py); "
                             "null: uniform batches"))

    def one_local_step(self) -> bool:
        """True where every client takes exactly one optimiser step per round, whatever its data: from the
        start weights, a term that vanishes there with its gradient (a proximal term) changes nothing."""
        if self.local_epochs is None:
            return self.local_steps == 1
        return self.local_epochs == 1 and self.batch_size is None


@dataclass
class ClientState:
    """What one client keeps between rounds: its view of the data, its model and optimiser. A method
    whose clients keep more (a control variate, a previous model) subclasses it with typed fields."""
    cid: int
    view: Any
    model: nn.Module
    optimizer: torch.optim.Optimizer | None
    task: str
    loss_weight: torch.Tensor | None = None
    sampler: Any = None        # fgx.sampler.NeighborSampler of sampled steps (fanouts), built at the first one
    positive_share: float | None = None     # LocalTrainParams.positive_share: class-stratified batches


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


def make_client_state(ctx, client, view, model: nn.Module, kind: type[ClientState] = ClientState) -> ClientState:
    """Client ``client``'s state with the algorithm's optimiser and cross-entropy class weights.

    Args:
        ctx: the run's Context (``ctx.params``: the algorithm's LocalTrainParams).
        client: its ClientData (``cid``).
        view: its graph (PyG Data: ``x`` [n, F], ``edge_index`` [2, E], labels and split masks).
        model: its model.
        kind: a method's subclass of ClientState (its own fields keep their defaults).
    Returns:
        the state, with ``loss_weight`` [C] or None."""
    p = ctx.params
    task = ctx.info.task
    weight = None
    weighted = p.class_weighted if p.class_weighted is not None else task == "edge"
    if p.class_weights:
        if len(p.class_weights) != ctx.out_dim:
            raise ConfigError("algorithm.class_weights", p.class_weights, f"a list of {ctx.out_dim} weights")
        weight = torch.tensor(p.class_weights, dtype=torch.float, device=ctx.device)
    elif weighted:
        _, y = targets(view, task, "train")
        weight = class_weights(y.cpu(), ctx.out_dim).to(ctx.device)
    share = getattr(p, "positive_share", None)
    check_positive_share(share, p.batch_size, ctx.out_dim)
    state = kind(client.cid, view, model, make_optimizer(model, p), task, weight)
    state.positive_share = share
    return state


def check_positive_share(share: float | None, batch_size: int | None, num_classes: int) -> None:
    """Stratified batches need batches and two classes: refuse a share that would change nothing."""
    if share is None:
        return
    if batch_size is None:
        raise ConfigError("algorithm.positive_share", share, "null with full batches (set algorithm.batch_size)")
    if num_classes != 2:
        raise ConfigError("algorithm.positive_share", share, f"null on a task with {num_classes} outputs (binary tasks only)")


def num_train_items(state: ClientState) -> int:
    return int(split_mask(state.view, state.task, "train").sum())


def steps_per_round(state: ClientState, p: LocalTrainParams) -> int:
    """K = ``local_steps``, or with ``local_epochs`` E: E · ⌈n / batch_size⌉ (E with full batches), n the
    client's training items."""
    if p.local_epochs is None:
        return p.local_steps
    n = num_train_items(state)
    per_epoch = 1 if p.batch_size is None else max(1, -(-n // p.batch_size))
    return p.local_epochs * per_epoch


def round_seed(seed: int, r: int) -> int:
    """Seed of round ``r``'s client-side randomness (a client adds its id)."""
    return seed * 1_000_003 + r * 1009


def state_delta(new: dict[str, torch.Tensor], old: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """new - old over ``old``'s keys (what a client sends up after training from ``old``).

    Args:
        new: a state dict, name -> tensor of any shape.
        old: the state the client started from, a subset of ``new``'s names with the same shapes.
    Returns:
        name -> ``new - old`` for floating tensors; integer buffers (BN's step count) as ``new`` has them."""
    return {k: (new[k] - old[k]) if new[k].is_floating_point() else new[k].clone() for k in old}


# -- the objective: how a method plugs into local training ----------------------------------------------

@dataclass
class Step:
    """One local step's forward pass, as an objective's ``term`` sees it.

    Args:
        logits: [n, C] outputs of every item of the view (a sampled step: [b, C], the seed items' only).
        items: [b] indices into ``logits`` of the step's training items (None on a sampled step, whose
            ``logits`` are the seeds').
        y: [b] the labels of those items.
        rep: [n, d] the representation under the classifier, where the objective's ``forward`` gives one; else None."""
    logits: torch.Tensor
    items: torch.Tensor | None
    y: torch.Tensor
    rep: torch.Tensor | None = None


class Objective:
    """What a method adds to local training; this class as it is adds nothing (plain averaging's objective).

    The server builds one per round (the algorithm's ``client_objective``); on each client,
    ``local_update`` calls ``start`` before it loads the round's weights, the loop calls ``term`` after
    every forward pass and ``before_step`` between backward and the optimiser step, and ``finish`` after
    the last step. An objective is pickled to remote clients: keep it plain data."""

    #: None where ``batched_term`` is this objective over a batch of clients (executor=batched then trains
    #: them at once); otherwise why it has no batched form (executor=batched runs its clients one by one)
    unbatched: str | None = None
    #: True where ``term`` and its gradient are exactly zero at the start weights the server sent (a proximal
    #: term anchored at them): the first step from those weights skips it (the same arithmetic, less work)
    vanishes_at_start: bool = False

    def start(self, state: ClientState, weights: dict[str, torch.Tensor] | None) -> "Objective":
        """The objective of client ``state`` this round, before ``weights`` (the start weights the server
        sent; None when each client keeps its own) are loaded. Default: this one for every client."""
        return self

    def forward(self, state: ClientState) -> tuple[torch.Tensor | None, torch.Tensor]:
        """(representation [n, d] or None, logits [n, C]) of every item of the client's view, training mode
        (a whole-view step; a sampled step runs the model on its subgraph). A term that reads the
        representation under the classifier returns it here (fgx/algorithms/representation.py)."""
        return None, state.model(state.view)

    def term(self, state: ClientState, step: Step) -> torch.Tensor | None:
        """The method's own scalar loss added to the cross-entropy of this step (None: nothing)."""
        return None

    def before_step(self, state: ClientState) -> None:
        """After ``backward``, before the optimiser steps: a method that changes gradients does it here."""

    def finish(self, state: ClientState, delta: dict[str, torch.Tensor] | None) -> Any:
        """After local training (``delta``: the update, None without start weights): what the client keeps
        for later rounds goes on its state; the return value travels up beside the update (``ClientUpdate.sent``)."""
        return None

    def batched_term(self, params: dict[str, torch.Tensor]) -> torch.Tensor | None:
        """``term`` for C clients at once (only when ``unbatched`` is None).

        Args:
            params: name -> [C, ...] the clients' parameters stacked (row i: client i's), as the
                batched executor trains them.
        Returns:
            [C] each client's term, or None for no term."""
        return None


NO_OBJECTIVE = Objective()


@dataclass
class SeededDropout(Objective):
    """An objective whose clients draw dropout from torch's global generator seeded ``round_seed + cid``
    at the start of their round (methods that did so before every executor seeded each client's work;
    their numbers are recorded that way)."""
    round_seed: int
    unbatched = "its dropout draws from torch's generator seeded by round and client, not the batched dropout's"

    def start(self, state: ClientState, weights: dict[str, torch.Tensor] | None) -> "Objective":
        torch.manual_seed(self.round_seed + state.cid)
        return self


@dataclass
class LocalLoss:
    """Means over a client's local steps (NaN for a client without training items)."""
    loss: float        # cross-entropy + the objective's term
    ce: float          # cross-entropy
    term: float        # the objective's term (0.0 where it had none)


@dataclass
class ClientUpdate:
    """What ``local_update`` returns from a client."""
    delta: dict[str, torch.Tensor] | None    # new - start weights over the names sent down (None: none were)
    loss: LocalLoss
    sent: Any = None                          # the objective's ``finish``: what goes up beside the update


def sampled_forward(state: ClientState, seeds: torch.Tensor, fanouts: list[int],
                    generator) -> tuple[torch.Tensor, torch.Tensor]:
    """The model on fgx's sampled neighbourhood of the seed items only.

    Args:
        seeds: [b] ids of training items (nodes, or edges on edge tasks) of the client's view.
        fanouts: neighbours sampled per hop (-1: all).
    Returns:
        (logits [b, C] of the seeds, their labels [b])."""
    from fgx.sampler import NeighborSampler, sample_view

    view = state.view
    if state.sampler is None:
        state.sampler = NeighborSampler(view.edge_index.cpu(), view.num_nodes, fanouts, direction="in")
    if state.task == "edge":
        sample = state.sampler.sample_edges(seeds.cpu(), generator)
        sub = sample_view(view, sample).to(view.x.device)
        k = sample.num_seed_edges
        if getattr(state.model, "trim_exact", False):     # the readout scores the seeds only (LayerwiseModel.forward)
            return state.model(sub, scored_edges=k)[:k], sub.edge_y[:k]
        return state.model(sub)[:k], sub.edge_y[:k]
    sample = state.sampler.sample_nodes(seeds.cpu(), generator)
    sub = sample_view(view, sample).to(view.x.device)
    return state.model(sub)[: sample.num_seed_nodes], sub.y[: sample.num_seed_nodes]


def local_training(state: ClientState, steps: int, batch_size: int | None, generator: torch.Generator,
                   objective: Objective = NO_OBJECTIVE, fanouts: list[int] | None = None,
                   at_start_weights: bool = False) -> LocalLoss:
    r"""The one local-training loop: ``steps`` optimiser steps on

    .. math::
        \mathcal{L} = \mathrm{CE}_w(f(\mathcal{G})_B, y_B) + \mathrm{term}(B)

    the class-weighted cross-entropy over a batch B of the client's training items plus the objective's
    term, with the objective's ``before_step`` between backward and the optimiser step.

    Args:
        state: the client (its model is trained in place, its optimiser steps).
        steps: optimiser steps.
        batch_size: training items per step, a random batch drawn from ``generator`` ([b] indices); None
            or at least n: all n of them, in order.
        generator: the client's batch (and neighbour-sampling) generator.
        objective: the method's part (fgx.federation.client.Objective); the default adds nothing.
        fanouts: with a batch: each step on the sampled L-hop subgraph of its batch (neighbours per hop).
        at_start_weights: the model holds exactly the weights the server sent (an objective that
            ``vanishes_at_start`` then adds no term to the first step).
    Returns:
        LocalLoss: the means over steps of the loss, the cross-entropy and the term (NaN without
        training items: then nothing is trained)."""
    from fgx.progress import tick

    state.model.train()
    mask, y_all = targets(state.view, state.task, "train")
    ids = mask.nonzero().view(-1)
    n = ids.numel()
    if n == 0:
        return LocalLoss(float("nan"), float("nan"), float("nan"))
    total, ce_total, term_total = 0.0, 0.0, 0.0
    plan = stratified_batches(y_all, batch_size, getattr(state, "positive_share", None))   # a method's own state may lack it
    weight = state.loss_weight
    if plan is not None:
        weight = plan.correction.to(device=ids.device, dtype=torch.float) * (1 if weight is None else weight)
    for step in range(steps):
        tick(f"client {state.cid} step", step + 1, steps)
        pick = None
        if plan is not None:
            pick = plan.draw(generator).to(ids.device)
        elif batch_size is not None and batch_size < n:
            pick = torch.randperm(n, generator=generator)[:batch_size].to(ids.device)
        state.optimizer.zero_grad()
        if fanouts and pick is not None:
            logits, y = sampled_forward(state, ids[pick], fanouts, generator)
            batch = Step(logits, None, y)
            out = logits
        else:
            rep, logits = objective.forward(state)
            items, y = (ids, y_all) if pick is None else (ids[pick], y_all[pick])
            batch = Step(logits, items, y, rep)
            out = logits[items]
        ce = nn.functional.cross_entropy(out, y, weight=weight)
        term = None if step == 0 and at_start_weights and objective.vanishes_at_start else objective.term(state, batch)
        loss = ce if term is None else ce + term
        loss.backward()
        objective.before_step(state)
        state.optimizer.step()
        value = float(loss.detach())
        total += value
        if term is None:
            ce_total += value
        else:
            ce_total += float(ce.detach())
            term_total += float(term.detach())
    return LocalLoss(total / steps, ce_total / steps, term_total / steps)


def local_update(state: ClientState, weights: dict[str, torch.Tensor] | None, p: LocalTrainParams,
                 round_seed: int, objective: Objective = NO_OBJECTIVE) -> ClientUpdate:
    """A client's round: the objective's ``start``, the start weights loaded, ``steps_per_round`` steps of
    ``local_training``, the update, the objective's ``finish``.

    Args:
        state: the client.
        weights: name -> tensor, what the server sent (a method sharing part of the model sends that
            part; the rest of the model stays the client's); None: the client keeps its own model.
        p: the algorithm's LocalTrainParams (steps, batch size, fanouts).
        round_seed: the round's seed; the batch generator is seeded ``round_seed + cid``.
        objective: the round's objective (built by the server; ``start`` binds it to this client).
    Returns:
        ClientUpdate(delta: name -> (new - start) over ``weights``' names, or None; loss: LocalLoss;
        sent: what the objective's ``finish`` returned)."""
    own = objective.start(state, weights)
    if weights is not None:
        state.model.load_state_dict(weights, strict=False)
    g = torch.Generator().manual_seed(round_seed + state.cid)
    loss = local_training(state, steps_per_round(state, p), p.batch_size, g, own, p.fanouts, weights is not None)
    delta = state_delta(state.model.state_dict(), weights) if weights is not None else None
    return ClientUpdate(delta, loss, own.finish(state, delta))
