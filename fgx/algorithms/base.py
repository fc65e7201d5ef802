"""The federated protocol interface, and the server-side pieces most algorithms share.

An algorithm owns what clients do locally, what they send (declared in ``messages``) and how the
server combines it. The trainer calls ``setup()`` once, ``round(r)`` per round, ``predict(client)``
at evaluations, and ``state_dict()``/``load_state_dict()`` for checkpoints. A round has fixed phases
(``round``): a method overrides the phase its paper changes. The client side (local-training params,
client state, the one local-training loop and its objectives) is fgx/federation/client.py."""
from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from fgx import inference
from fgx.config import ConfigError
from fgx.federation.channel import Message
from fgx.federation.client import (
    NO_OBJECTIVE,
    ClientUpdate,
    Objective,
    local_update,
    num_train_items,
    round_seed,
)
from fgx.federation.robust import weighted_average  # noqa: F401  (the methods import it from here)
from fgx.tasks import SPLITS, local_view, targets


class Algorithm:
    messages: dict[str, Message] = {}
    # True where each client keeps its own model after its local step (``local_model_for``): what
    # ``eval_model=local`` scores
    has_local_models: bool = False
    # (model name, why) for a method built around one model (FedSage+ on GraphSAGE): check_config
    # refuses any other before work starts
    requires_model: tuple[str, str] | None = None
    # a decentralised method whose peers gossip models (fgx/algorithms/gossip.py): what privacy=mf_gdp accounts
    gossip: bool = False
    # the kind of local objective its clients train under through the client runtime's ``local_update``
    # (``client_objective`` builds the round's); None (the default): some of its client work is its own.
    # executor=batched asks it, before work starts, whether every client call can run as one batch
    objective: type[Objective] | None = None
    # True in the class body of an algorithm whose ``aggregate`` (and ``round``, where it has its own) call
    # ``ctx.threat.tamper`` and ``ctx.aggregator`` (FedAvg's aggregate phase); see ``calls_threat_hooks``
    threat_hooks: bool = False
    # the reason, where the server needs each client's update in clear (clustering on updates, personalised
    # aggregation by update similarity): secure aggregation refuses such a method with it; None: the sum will do
    needs_individual_updates: str | None = None

    def __init__(self, ctx):
        self.ctx = ctx
        self.params = ctx.params

    # -- protocol -------------------------------------------------------------------------
    def setup(self) -> None:
        raise NotImplementedError

    # -- the round, in fixed phases (Flower's configure_fit / fit / aggregate_fit) ----------
    def round(self, r: int) -> dict[str, float]:
        """One round: select the clients, configure what they start from, the round's client objective,
        each chosen client's ``local_update`` through the executor, aggregate what they send, update the
        server. Returns the scalars to log (``loss``: the mean client loss, and diagnostics). A method
        overrides the phase its paper changes; one whose paper changes the order of the phases overrides
        ``round`` (docs/ARCHITECTURE.md names them)."""
        chosen = self.select(r)
        weights = self.configure(chosen, r)
        objective = self.client_objective(chosen, weights, r)
        updates = self.ctx.executor.map(local_update, chosen, weights, self.params, round_seed(self.ctx.seed, r),
                                        objective)
        combined, stats = self.aggregate(chosen, updates, r)
        return {**stats, **self.server_update(combined, r)}

    def select(self, r: int) -> list:
        """This round's clients (their ClientStates): every client."""
        return self.states

    def configure(self, chosen: list, r: int) -> dict[str, torch.Tensor] | None:
        """What the chosen clients load before training, sent down the channel (None: each keeps its own model)."""
        return None

    def client_objective(self, chosen: list, weights: dict[str, torch.Tensor] | None, r: int) -> Objective:
        """The round's local objective (an instance of ``objective``; the plain one adds nothing), with
        whatever it needs sent down the channel."""
        return NO_OBJECTIVE

    def aggregate(self, chosen: list, updates: list[ClientUpdate], r: int) -> tuple[Any, dict[str, float]]:
        """The clients' updates up the channel and their combination; returns (what ``server_update``
        applies, the round's scalars)."""
        return None, {"loss": mean_loss(u.loss.loss for u in updates)}

    def server_update(self, combined: Any, r: int) -> dict[str, float]:
        """Apply the combination to the server's state; returns further scalars (diagnostics)."""
        return {}

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

    # -- optional capabilities: what the trainer and the privacy mechanisms ask every algorithm, with
    # the answer of a method that has none -------------------------------------------------------
    def client_metrics(self, client) -> dict[str, dict[str, float]] | None:
        """{split: {metric: value}} of a method that scores its clients itself (ranking and regression
        tasks: no logits and labels); None: the trainer scores ``predict``'s outputs."""
        return None

    def privacy_report(self) -> dict | None:
        """The accounting of a local DP the method runs itself (FedPerGNN), for privacy.json; None: none."""
        return None

    def node_embeddings(self, max_nodes: int | None = None, seed: int = 0) -> torch.Tensor | None:
        """[n, d] the released embedding of every owned node (or ``max_nodes`` of them at random) under the
        final model, for metric-DP's ρ over all nodes; None where the method releases none."""
        return None

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
    def calls_threat_hooks(cls) -> bool:
        """Whether a round of this algorithm calls ``ctx.threat.tamper`` and ``ctx.aggregator``."""
        return calls_threat_hooks(cls)

    @classmethod
    def averages_updates_plainly(cls) -> bool:
        """Whether its server needs only the weighted average of the clients' updates (what secure
        aggregation gives it); the plain-averaging round (fedavg.py) says yes for itself and its heirs."""
        return False

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


def calls_threat_hooks(cls: type) -> bool:
    """True where a round of ``cls`` calls the threat hooks: the class that defines its ``aggregate``, and
    the one that defines its ``round`` unless that is Algorithm's, declare ``threat_hooks = True`` in their
    own body (a subclass that overrides either phase without declaring it is taken not to call them)."""
    for phase in ("round", "aggregate"):
        owner = next(k for k in cls.__mro__ if phase in vars(k))
        if phase == "round" and owner is Algorithm:
            continue
        if not vars(owner).get("threat_hooks", False):
            return False
    return True


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
