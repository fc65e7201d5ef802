"""The link task's model: an encoder (the node GNN of the ``model`` group, gcn/sage/gin, its layers
unchanged, with ``model.hidden`` outputs) gives every node of the client's graph an embedding z, and a
decoder scores each labelled pair (u, v) of the view (``view.link_index``) from z_u * z_v: its sum (the
dot product) or an MLP on it (OGB's LinkPredictor). ``forward`` returns one row per pair, [0, s]: the
cross-entropy the algorithms' training loop takes over these rows is binary cross-entropy on the logit
s, so every algorithm whose objective is task-agnostic trains the link model unchanged.

The representation a method reads per item (MOON's contrastive term; fgx/algorithms/representation.py)
is that of the pair's source under the encoder's last linear map, the representation MOON reads on the
node task: it stays the item's own when a training step draws new destinations for the negatives
(``task.resample``), which a pair representation would not (MOON computes the global and previous models'
representations once per round). Contrasting the embedding z itself, which the dot product reads, kept
the cross-entropy at log 2 from the second round on (measured on Cora, mu = 0.1). FedPer's personal head is the last of ``layer_prefixes``: the
decoder's last layer, or, with the dot product, the encoder's last layer."""
from __future__ import annotations

import torch
from torch import nn

from fgx.link.split import fresh_pairs


class MLPDecoder(nn.Module):
    def __init__(self, width: int, hidden: int, layers: int):
        super().__init__()
        sizes = [width] + [hidden] * (layers - 1) + [1]
        self.lins = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        for i, lin in enumerate(self.lins):
            h = lin(h)
            if i < len(self.lins) - 1:
                h = torch.relu(h)
        return h.view(-1)


class LinkModel(nn.Module):
    def __init__(self, encoder: nn.Module, decoder: MLPDecoder | None):
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder

    def forward(self, view) -> torch.Tensor:
        return self._forward(view, with_rep=False)[1]

    def split_forward(self, view) -> tuple[torch.Tensor, torch.Tensor]:
        """(the representation of every labelled pair's source under the encoder's last layer, the pair's
        [0, s] row). In training, with ``task.resample``, the training negatives get fresh destinations
        (fgx/link/split.py: fresh_pairs), and only the training rows are computed (the others are zero: a
        training step reads no other)."""
        return self._forward(view, with_rep=True)

    def _forward(self, view, with_rep: bool) -> tuple[torch.Tensor | None, torch.Tensor]:
        enc = self.encoder          # its forward, layer by layer (the contract of fgx/models/base.py)
        state = enc.encode(view)
        h, e = state["h"], state["e"]
        for i in range(enc.num_layers):
            pre, e = enc.layer(i, h, e, view.edge_index)
            h = enc.activate(i, pre)
        z = enc.head(h, e, view.edge_index, view)
        redraw = self.training and getattr(view, "link_redraw", None) is not None
        pairs = fresh_pairs(view) if redraw else view.link_index
        rows = view.link_train_mask.nonzero().view(-1) if self.training else None
        u, v = pairs if rows is None else pairs[:, rows]
        pair = z[u] * z[v]
        s = pair.sum(-1) if self.decoder is None else self.decoder(pair)
        rep = h[u] if with_rep else None
        if rows is not None:
            s = s.new_zeros(pairs.size(1)).index_put((rows,), s)
            rep = rep.new_zeros(pairs.size(1), rep.size(1)).index_put((rows,), rep) if with_rep else None
        return rep, torch.stack([torch.zeros_like(s), s], 1)

    def layer_prefixes(self) -> list[str]:
        enc = [f"encoder.{p}" for p in self.encoder.layer_prefixes()]
        return enc + ([f"decoder.lins.{i}." for i in range(len(self.decoder.lins))] if self.decoder is not None else [])


class LinkModelBuilder:
    """The ``model_builder`` of a link-task run: the model group's builder for the encoder, with
    ``model.hidden`` outputs, and the task's decoder. A class, not a closure: it pickles."""

    def __init__(self, encoder_builder, task):
        self.encoder_builder, self.task = encoder_builder, task

    def __call__(self, p, in_dim: int, out_dim: int, info) -> LinkModel:
        encoder = self.encoder_builder(p, in_dim, p.hidden, info)
        t = self.task
        decoder = MLPDecoder(p.hidden, t.decoder_hidden or p.hidden, t.decoder_layers) if t.decoder == "mlp" else None
        return LinkModel(encoder, decoder)
