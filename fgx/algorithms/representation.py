"""Client-side pieces of the methods that act on a model's representation (MOON's contrastive term,
FedProto's and FedTGP's prototypes) or on its gradients (SCAFFOLD's correction, FedDC's drift terms):

- ``split_forward``: the representation the classifier reads (the "base" output of the authors' codes:
  PFLlib's ``model.base``, OpenFGL's ``embedding``) and the logits, from one forward pass;
- ``objective_steps``: K optimiser steps on cross-entropy plus a method's own term over that forward;
- ``class_prototypes``: per-class means of representations (FedProto / FedTGP).

Not a registered component: shared by scaffold.py, moon.py, fedproto.py, fedtgp.py and feddc.py."""
from __future__ import annotations

import torch
from torch import nn

from fgx.algorithms.base import require_model
from fgx.config import ConfigError
from fgx.models.base import NodeGNN, dropout
from fgx.models.graph_pool import GraphGNN
from fgx.tasks import targets

# the models whose classifier input split_forward reads (NodeGNN with a linear classifier, GraphGNN)
MODELS_WITH_REPRESENTATION = ("gcn", "sage", "gin", "gcn_graph", "gin_graph")


def check_setting(params, validated, algo: str) -> None:
    """Refuse, before any work, what these methods do not run: sampled neighbourhoods (their steps run
    on the whole client graph) and a model whose classifier input cannot be read (a last convolution
    that outputs the logits itself has no representation separate from them)."""
    if getattr(params, "fanouts", None):
        raise ConfigError("algorithm.fanouts", params.fanouts, f"null with algorithm={algo} (whole client graphs)")
    require_model(validated, *MODELS_WITH_REPRESENTATION,
                  why=f"algorithm={algo} needs the representation under a linear classifier")
    model = validated.params.get("model")
    if getattr(model, "classifier", "linear") != "linear":
        raise ConfigError("model.classifier", model.classifier,
                          f"linear with algorithm={algo} (it needs the representation under the classifier)")


def split_forward(model: nn.Module, view) -> tuple[torch.Tensor, torch.Tensor]:
    """(representation, logits): the input of the model's last linear map, without the dropout the
    head applies to it in training, and the model's output. ``logits`` equals ``model(view)``. A model
    that defines its own ``split_forward`` (the link task's pair model, fgx/link/model.py) is read through it."""
    own = getattr(model, "split_forward", None)
    if own is not None:
        return own(view)
    node = isinstance(model, NodeGNN) and model.classifier is not None
    if not (node or isinstance(model, GraphGNN)):
        raise ConfigError("model.name", type(model).__name__,
                          f"one of {list(MODELS_WITH_REPRESENTATION)} (a model with a linear classifier)")
    s = model.encode(view)
    h, e = s["h"], s["e"]
    for i in range(model.num_layers):
        pre, e = model.layer(i, h, e, view.edge_index)
        h = model.activate(i, pre)
    if node:        # NodeGNN.head is classifier(dropout(h))
        return h, model.head(h, e, view.edge_index, view)
    # GraphGNN.head is readout(dropout(relu(post(pool(h))))): the representation is what readout reads
    rep = torch.relu(model.post(model.pool(h, view)))
    return rep, model.readout(dropout(rep, model.dropout, model.training))


def objective_steps(state, steps: int, batch_size: int | None, generator: torch.Generator, term=None,
                    before_step=None, max_grad_norm: float | None = None) -> tuple[float, float]:
    """``steps`` optimiser steps on cross-entropy over the client's training items (a random batch of
    ``batch_size`` per step, or all) plus ``term(state, rep, logits, batch, y)``, a method's own
    loss over the same forward pass. ``before_step(state)`` may change the gradients (SCAFFOLD);
    ``max_grad_norm`` clips them (FedDC's code). Returns the mean cross-entropy and the mean term."""
    state.model.train()
    mask, y_all = targets(state.view, state.task, "train")
    ids = mask.nonzero().view(-1)
    n = ids.numel()
    if n == 0:
        return float("nan"), float("nan")
    ce_total, term_total = 0.0, 0.0
    for _ in range(steps):
        pick = torch.arange(n) if batch_size is None or batch_size >= n else torch.randperm(n, generator=generator)[:batch_size]
        pick = pick.to(ids.device)
        batch, y = ids[pick], y_all[pick]
        state.optimizer.zero_grad()
        rep, logits = split_forward(state.model, state.view)
        ce = nn.functional.cross_entropy(logits[batch], y, weight=state.loss_weight)
        extra = term(state, rep, logits, batch, y) if term is not None else None
        loss = ce if extra is None else ce + extra
        loss.backward()
        if before_step is not None:
            before_step(state)
        if max_grad_norm is not None:
            nn.utils.clip_grad_norm_(state.model.parameters(), max_grad_norm)
        state.optimizer.step()
        ce_total += float(ce.detach())
        term_total += float(extra.detach()) if extra is not None else 0.0
    return ce_total / steps, term_total / steps


def class_prototypes(rep: torch.Tensor, y: torch.Tensor, num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(per-class mean of ``rep`` [C, d] (zero rows for absent classes), presence [C] as 0/1 floats)."""
    sums = torch.zeros(num_classes, rep.size(1), dtype=rep.dtype, device=rep.device).index_add_(0, y, rep)
    counts = torch.bincount(y, minlength=num_classes).to(rep.dtype)
    present = (counts > 0).to(rep.dtype)
    return sums / counts.clamp(min=1).unsqueeze(1), present
