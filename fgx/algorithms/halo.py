"""Received embeddings of remote (halo) nodes, plugged into a FedAvg-style client model.

On an edge task a client holds its cross-client transactions, whose remote endpoints are halo nodes
of its view (featureless, no neighbourhood). FedGCN (embeddings shared once, at initialisation) and
Swift-FedGNN (fresh embeddings at its periodic cross-client steps) send a client the layer-l
embeddings of its halo nodes, computed by their owners; ``HaloEmbeddings`` runs the wrapped
layer-wise model (docs/ARCHITECTURE.md) and, after each layer l, replaces the rows of the halo nodes
it has a received embedding for. Received rows are constants: no gradient crosses clients.

The wrapper's ``state_dict``/``load_state_dict`` are the wrapped model's, so FedAvg's averaging,
checkpoints and optimisers see the plain model."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from fgx.federation.client import ClientState


class HaloEmbeddings(nn.Module):
    def __init__(self, inner: nn.Module, n_own: int):
        super().__init__()
        self.inner = inner
        self.n_own = n_own
        self.rows: dict[int, torch.Tensor] = {}     # 1-based layer -> [n_halo, d] received embeddings
        self.has: dict[int, torch.Tensor] = {}      # 1-based layer -> [n_halo] bool: a row was received

    @property
    def num_layers(self) -> int:
        return self.inner.num_layers

    def set_rows(self, layer: int, halo_idx: torch.Tensor, values: torch.Tensor, n_halo: int) -> None:
        """Rows ``values`` for the halo nodes ``halo_idx`` (0-based among the view's halo nodes)."""
        dev = values.device
        rows = self.rows.get(layer)
        if rows is None:
            rows = torch.zeros(n_halo, values.size(-1), dtype=values.dtype, device=dev)
            self.has[layer] = torch.zeros(n_halo, dtype=torch.bool, device=dev)
        rows = rows.clone()
        rows[halo_idx] = values.detach()
        self.rows[layer] = rows
        self.has[layer][halo_idx] = True

    def clear(self) -> None:
        self.rows, self.has = {}, {}

    def forward(self, view) -> torch.Tensor:
        m = self.inner
        s = m.encode(view)
        h, e = s["h"], s["e"]
        # rows of a sampled subgraph carry their client-view ids (fgx.sampler.sample_view)
        ids = getattr(view, "global_node", None)
        if ids is None:
            ids = torch.arange(view.num_nodes, device=h.device)
        halo_pos = (ids >= self.n_own).nonzero().view(-1)
        halo_idx = ids[halo_pos] - self.n_own
        for i in range(m.num_layers):
            pre, e = m.layer(i, h, e, view.edge_index)
            h = m.activate(i, pre)
            rows = self.rows.get(i + 1)
            if rows is not None and halo_pos.numel():
                keep = self.has[i + 1][halo_idx.to(rows.device)].to(h.device)
                pos, idx = halo_pos[keep], halo_idx[keep]
                h = h.index_put((pos,), rows[idx.to(rows.device)].to(h.dtype).to(h.device))
        return m.head(h, e, view.edge_index, view)

    # the layer-wise interface on the client's whole view (fgx.inference runs the inner model's layers):
    # after layer l the received rows replace the halo rows, as in forward
    def encode(self, view) -> dict:
        return self.inner.encode(view)

    def layer(self, i: int, h, e, edge_index, **kw):
        return self.inner.layer(i, h, e, edge_index, **kw)

    def activate(self, i: int, pre: torch.Tensor) -> torch.Tensor:
        h = self.inner.activate(i, pre)
        rows = self.rows.get(i + 1)
        if rows is None:
            return h
        idx = self.has[i + 1].nonzero().view(-1)
        pos = (idx + self.n_own).to(h.device)
        return h.index_put((pos,), rows[idx].to(h.dtype).to(h.device))

    def head(self, h, e, edge_index, view) -> torch.Tensor:
        return self.inner.head(h, e, edge_index, view)

    def state_dict(self, *args, **kwargs):
        return self.inner.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        return self.inner.load_state_dict(state_dict, strict=strict, assign=assign)


def layer_embeddings(model: nn.Module, view, nodes: torch.Tensor) -> list[torch.Tensor]:
    """Post-activation embeddings h^1..h^L of ``nodes`` (client-view ids) under ``model`` on the
    client's whole view, in eval mode, without gradient (what an owner sends about its nodes)."""
    inner = model.inner if isinstance(model, HaloEmbeddings) else model
    was = inner.training
    inner.eval()
    out = []
    with torch.no_grad():
        s = inner.encode(view)
        h, e = s["h"], s["e"]
        for i in range(inner.num_layers):
            pre, e = inner.layer(i, h, e, view.edge_index)
            h = inner.activate(i, pre)
            out.append(h[nodes].detach())
    inner.train(was)
    return out


@dataclass
class HaloClient(ClientState):
    """A client state that ``wrap_edge_clients`` can wrap: the map from global node ids to its view's."""
    global_to_local: torch.Tensor | None = None     # [num_global] local index of each global node id, -1: none


def owned_embeddings(state, requests: dict) -> dict | None:
    """Client side: the requested global node ids (all owned here) with their h^1..h^L."""
    req = requests.get(state.cid)
    if req is None:
        return None
    local = state.global_to_local[req.cpu()].to(state.view.x.device)
    return {"ids": req, "h": layer_embeddings(state.model, state.view, local)}


def owner_of(clients, num_global: int) -> torch.Tensor:
    """Global node id -> the client that owns it (-1: nobody)."""
    owner = torch.full((num_global,), -1, dtype=torch.long)
    for c in clients:
        owner[c.nodes] = c.cid
    return owner


def wrap_edge_clients(algo) -> None:
    """Give each FedAvg client state (HaloClient) a HaloEmbeddings model (same parameters, same optimiser)
    and the map from global node ids to its view's ids."""
    ctx = algo.ctx
    algo.num_global = 1 + max(int(torch.cat([c.nodes, c.halo]).max()) for c in ctx.clients)
    for c, s in zip(ctx.clients, algo.states):
        s.model = HaloEmbeddings(s.model, c.num_owned)
        g2l = torch.full((algo.num_global,), -1, dtype=torch.long)
        g2l[c.nodes] = torch.arange(c.num_owned)
        s.global_to_local = g2l


def send_halo_embeddings(algo, dst: list[int], round: int, up_kind: str, down_kind: str) -> dict[int, list]:
    """Each client in ``dst`` gets h^1..h^L of its halo nodes from their owners, through the server:
    the server asks each owner for the nodes it needs (``cross_request``), owners upload their rows
    (``up_kind``, a release), the server sends each client the rows of its halo (``down_kind``).
    Returns {client id: list over layers of [n_halo, d] rows in the order of the client's halo}."""
    ctx, ch = algo.ctx, algo.ctx.channel
    clients = {c.cid: c for c in ctx.clients}
    dst = [i for i in dst if clients[i].halo.numel()]
    if not dst:
        return {}
    owner = owner_of(ctx.clients, algo.num_global)
    need = torch.unique(torch.cat([clients[i].halo for i in dst]))
    requests = {}
    for j in sorted(set(owner[need].tolist()) - {-1}):
        ids = need[owner[need] == j]
        requests[j] = ch.send("cross_request", ids, src="server", dst=j, round=round)
    parts = ctx.executor.map(owned_embeddings, [algo.states[j] for j in requests], requests)
    buffer: list[torch.Tensor] | None = None
    for j, part in zip(requests, parts):
        got = ch.send(up_kind, part, src=j, dst="server", round=round)
        ids = got["ids"].cpu()
        if buffer is None:
            buffer = [torch.zeros(algo.num_global, h.size(-1)) for h in got["h"]]
        for layer, h in enumerate(got["h"]):
            buffer[layer][ids] = h.detach().cpu().float()
    out = {}
    for i in dst:
        halo = clients[i].halo
        got = ch.send(down_kind, {"ids": halo, "h": [b[halo] for b in buffer]}, src="server", dst=i, round=round)
        out[i] = got["h"]
    return out


def apply_halo_rows(state, rows: list[torch.Tensor]) -> None:
    """Install received rows (all halo nodes, every layer) in a client's HaloEmbeddings model."""
    n_halo = state.view.num_nodes - state.model.n_own
    idx = torch.arange(n_halo, device=state.view.x.device)
    for layer, h in enumerate(rows, start=1):
        state.model.set_rows(layer, idx, h.to(state.view.x.device), n_halo)
