"""Client-side pieces of the methods that act on a model's representation (MOON's contrastive term,
FedProto's and FedTGP's prototypes) or on its gradients (SCAFFOLD's correction, FedDC's drift terms):

- ``split_forward``: the representation the classifier reads (the "base" output of the authors' codes:
  PFLlib's ``model.base``, OpenFGL's ``embedding``) and the logits, from one forward pass;
- ``RepresentationObjective``: a local objective (fgx.federation.client.Objective) whose term reads
  that representation (MOON, FedProto, FedTGP);
- ``class_prototypes``: per-class means of representations (FedProto / FedTGP).

Not a registered component: shared by scaffold.py, moon.py, fedproto.py, fedtgp.py and feddc.py."""
from __future__ import annotations

import torch
from torch import nn

from fgx.algorithms.base import require_model
from fgx.config import ConfigError
from fgx.federation.client import Objective
from fgx.models.base import NodeGNN, dropout
from fgx.models.graph_pool import GraphGNN

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
    that defines its own ``split_forward`` (the link task's pair model, fgx/link/model.py) is read through it.

    Args:
        model: a NodeGNN with a linear classifier, or a GraphGNN.
        view: a client's graph (PyG Data) with ``x`` [n, F] and ``edge_index`` [2, E] (graph tasks:
            ``graph`` [n], the graph of each node).
    Returns:
        (rep [m, d], logits [m, C]): m = n nodes, or the view's graphs on graph tasks."""
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


class RepresentationObjective(Objective):
    """An objective whose term reads the representation under the classifier (``Step.rep``): the local
    steps run ``split_forward``. No batched form: the batched executor's forward (fgx/federation/batched.py)
    computes the logits of stacked GCN/SAGE clients, not a representation per client."""
    unbatched = ("its term reads each client's representation under the classifier, which the batched forward "
                 "does not compute")

    def forward(self, state):
        return split_forward(state.model, state.view)


def class_prototypes(rep: torch.Tensor, y: torch.Tensor, num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-class means of representations.

    Args:
        rep: [m, d] representations of m items.
        y: [m] their classes in 0..num_classes-1.
    Returns:
        (prototypes [C, d], zero rows for absent classes; presence [C] as 0/1 floats)."""
    sums = torch.zeros(num_classes, rep.size(1), dtype=rep.dtype, device=rep.device).index_add_(0, y, rep)
    counts = torch.bincount(y, minlength=num_classes).to(rep.dtype)
    present = (counts > 0).to(rep.dtype)
    return sums / counts.clamp(min=1).unsqueeze(1), present
