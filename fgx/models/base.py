"""Shared shape of fgx's node GNNs: a stack of PyG convolutions with ReLU and dropout, then either a
linear classifier (``classifier: linear``, the FED-PUB / OpenFGL backbone: conv → ReLU → dropout per
layer, then Linear) or a last convolution that produces the class logits itself (``classifier: none``).
``input_dropout`` drops out the raw input features before the first layer (off in the field's
backbones). ``forward(data)`` reads ``data.x`` and ``data.edge_index``.

``encode/layer/activate/head`` run the network layer by layer, so algorithms that exchange
embeddings between clients (CE-FedGNN) can replace remote nodes' rows between layers."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from fgx.config import spec


@dataclass
class GNNParams:
    layers: int = field(default=2, metadata=spec(min=1))
    hidden: int = field(default=64, metadata=spec(min=1))
    dropout: float = field(default=0.5, metadata=spec(min=0.0, max=1.0))
    input_dropout: bool = False     # dropout on the raw input features too
    classifier: str = field(default="linear", metadata=spec(
        choices=["linear", "none"], help="linear: every layer is hidden-wide, a Linear maps to the classes; "
                                         "none: the last layer outputs the class logits"))


class LayerwiseModel(nn.Module):
    """The layer-wise contract (docs/ARCHITECTURE.md): ``forward`` is exactly encode, then
    layer + activate per layer, then head, so algorithms that run the layers themselves (CE-FedGNN)
    compute the same function."""

    num_layers: int
    # True where a node's layer output depends only on its own row and its in-edges (sum/mean/PNA
    # aggregation over in-edges, per-row normalisation in eval mode): then, in evaluation, layer i of
    # a hop-ordered sampled subgraph (fgx.sampler) needs only the edges picked at hops <= L - i, which
    # gives the seeds exactly the outputs of the whole subgraph. Not GCN: its symmetric normalisation
    # reads the source node's degree too.
    trim_exact: bool = False
    # True where a node's layer output depends only on its own row and its in-edges, as above, for node
    # models (GraphSAGE's mean, GIN's sum): fgx.inference then runs a layer in chunks of destination nodes
    in_edge_local: bool = False

    def forward(self, view, scored_edges: int | None = None) -> torch.Tensor:
        """``scored_edges`` (a trim_exact model on a hop-ordered sample): only the first ``scored_edges``
        edges (the seeds) are scored, so the last layer updates and the readout reads those edges only —
        the seeds' logits are those of the whole forward pass (in training too: the node updates, and
        their batch statistics, still cover every edge); the others are not returned."""
        s = self.encode(view)
        h, e = s["h"], s["e"]
        ei = view.edge_index
        ends = getattr(view, "edge_hop_end", None) if self.trim_exact and not self.training else None
        out = scored_edges if self.trim_exact else None
        L = self.num_layers
        for i in range(L):
            if ends:    # evaluation on a sampled subgraph: outputs for the edges picked at hops <= 1 only
                n = ends[min(L - i, len(ends) - 1)]
                ei, e = ei[:, :n], (e[:n] if e is not None else None)
            if out is not None and i == L - 1:
                pre, e = self.layer(i, h, e, ei, edge_out=out)
                ei = ei[:, :out]
            else:
                pre, e = self.layer(i, h, e, ei)
            h = self.activate(i, pre)
        return self.head(h, e, ei, view)


class NodeGNN(LayerwiseModel):
    def __init__(self, convs: list[nn.Module], dropout: float, classifier: nn.Module | None = None,
                 input_dropout: bool = False):
        super().__init__()
        self.convs = nn.ModuleList(convs)
        self.classifier = classifier
        self.dropout = dropout
        self.input_dropout = input_dropout

    @property
    def num_layers(self) -> int:
        return len(self.convs)

    def layer_prefixes(self) -> list[str]:
        """State-dict prefixes of the layers, input to output (FedPer keeps the last ones personal)."""
        return [f"convs.{i}." for i in range(len(self.convs))] + (["classifier."] if self.classifier is not None else [])

    # layer-wise interface (docs/ARCHITECTURE.md): CE-FedGNN swaps halo rows between layers
    def encode(self, view) -> dict:
        """The layers' input.

        Args:
            view: a graph (PyG Data) with ``x`` [n, F].
        Returns:
            {"h": [n, F] node states (the raw features), "e": None (no edge states)}."""
        return {"h": view.x, "e": None}

    def layer(self, i: int, h: torch.Tensor, e, edge_index: torch.Tensor):
        r"""Layer ``i``'s convolution, after dropout (layer 0: only with ``input_dropout``):

        .. math::
            \mathbf{H}^{(i+1)}_{\text{pre}} = \mathrm{conv}_i(\mathrm{dropout}(\mathbf{H}^{(i)}), \mathcal{E})

        Args:
            i: the layer, 0-based.
            h: [n, d_i] node states of every node of the graph.
            e: edge states (unused here: None).
            edge_index: [2, E] edges (source, target).
        Returns:
            (pre-activation node states [n, d_{i+1}], e)."""
        if i > 0 or self.input_dropout:
            h = dropout(h, self.dropout, self.training)
        return self.convs[i](h, edge_index), e

    def activate(self, i: int, pre: torch.Tensor) -> torch.Tensor:
        """ReLU of layer ``i``'s output [n, d]; the last layer without a classifier outputs logits as they are."""
        return torch.relu(pre) if i < self.num_layers - 1 or self.classifier is not None else pre

    def head(self, h: torch.Tensor, e, edge_index: torch.Tensor, view) -> torch.Tensor:
        """The logits: ``classifier(dropout(h))`` [n, C], or ``h`` itself [n, C] with ``classifier: none``.

        Args:
            h: [n, d] the last layer's activated node states."""
        if self.classifier is None:
            return h
        return self.classifier(dropout(h, self.dropout, self.training))


def dropout(h: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Inverted dropout, as ``nn.functional.dropout``, drawn from uniforms: on CPU torch's dropout samples
    its mask with ``bernoulli_``, about 3x slower than ``rand_like`` at a GNN layer's size (180 vs 60 us on a
    270 x 64 activation), which was a tenth of a FedAvg step on a Cora client (issue #26)."""
    if not training or p == 0.0:
        return h
    if p >= 1.0:
        return h * 0.0
    return h * (torch.rand_like(h) >= p) * (1.0 / (1.0 - p))


def dims(p: GNNParams, in_dim: int, out_dim: int) -> list[tuple[int, int]]:
    """(in, out) of each message-passing layer; with a linear classifier every layer is hidden-wide."""
    last = p.hidden if p.classifier == "linear" else out_dim
    sizes = [in_dim] + [p.hidden] * (p.layers - 1) + [last]
    return list(zip(sizes[:-1], sizes[1:]))


def node_gnn(p: GNNParams, convs: list[nn.Module], out_dim: int, cls: type = NodeGNN) -> NodeGNN:
    """A NodeGNN (or subclass ``cls``) from ``convs`` built over :func:`dims`, with the classifier ``p`` asks for."""
    head = nn.Linear(p.hidden, out_dim) if p.classifier == "linear" else None
    return cls(convs, p.dropout, head, p.input_dropout)
