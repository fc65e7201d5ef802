"""FedGNN (Wu et al., arXiv 2102.04925, "FedGNN: Federated Graph Neural Network for Privacy-Preserving
Recommendation") on subgraph node classification, as FED-PUB and FedGSP run it as a baseline: FedAvg of
the ``model`` (2-layer GCN by default) on local subgraphs *expanded by exchanging node embeddings*.
(Not CE-FedGNN's FedGNN-ST, ``algorithm=fedgnn_st``.)

The paper's privacy-preserving graph expansion, transposed from users/items to subgraph nodes. In the
paper a user's local graph holds the items it rated; the server matches (encrypted) item ids across
users, and every user receives the embeddings of the *other users who rated the same items* and adds
them to its graph as neighbours of those shared items. Here a client's graph holds its nodes; a node w
of another client that has one of them, n, as a neighbour (a cut edge w-n the partition removed) is
the "user with an identical neighbour", and it joins the client's graph as a neighbour of n:
1. Every ``expand_every`` rounds (and before round 1), each client computes h^L (L = ``share_layer``,
   the post-activation output of its first L layers under the current global model, on its own
   subgraph) for its owned nodes, and sends the server these embeddings with two token lists: its
   nodes' own ids and, per node, its neighbours' ids (owned neighbours and the remote ones it knows
   through cut edges). Tokens are a keyed permutation of the id space (t = (a·id + b) mod (2^31 - 1),
   a and b drawn from a key the clients share and the server lacks): the server matches equal ids
   without learning them, standing in for the paper's homomorphic encryption of item ids (a simulation
   of the matching, not a cryptographic protection).
2. For every neighbour token of client j's node w equal to the own token of client i's node n (i != j,
   and w not itself a node of i, as in overlapping partitions), the server sends client i the pair
   (n, h_w) without ids; at most ``max_expanded`` per node n (null: all).
3. Client i adds one virtual node per received embedding, linked to its n, and runs its model with the
   virtual rows entering layer L (the first L layers see the original subgraph). Local training and
   evaluation use the expanded graph; the global model is FedAvg'd as usual.
Raw features never leave a client (layer-L embeddings with L >= 1 do); labels stay home. The paper's
other privacy parts (local differential privacy on gradients, pseudo-interacted items) belong to the
recommendation setting; fgx's ``privacy=`` mechanisms cover the ``update`` messages instead."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import torch

from fgx.algorithms.base import flat_params
from fgx.algorithms.fedavg import FedAvg, FedAvgParams
from fgx.config import ConfigError, spec
from fgx.federation.channel import Message
from fgx.federation.client import ClientState, SeededDropout, round_seed
from fgx.models.base import LayerwiseModel
from fgx.registry import ALGORITHMS

PRIME = 2_147_483_647          # 2^31 - 1: tokens are an affine permutation modulo this prime


@dataclass
class FedGNNParams(FedAvgParams):
    expand_every: int = field(default=1, metadata=spec(
        min=0, help="re-exchange the embeddings every N rounds (0: only once, before round 1)"))
    share_layer: int = field(default=1, metadata=spec(
        min=1, help="L: the exchanged embeddings are h^L and enter the model at layer L (>= 1: no raw features)"))
    max_expanded: int | None = field(default=None, metadata=spec(
        min=1, help="most remote neighbours added to one node (null: every match)"))


def neighbour_pairs(client) -> torch.Tensor:
    """[2, P]: (owned local index v, global id of a neighbour of v), owned and remote neighbours alike."""
    d, n = client.data, client.num_owned
    gid = torch.cat([client.nodes, client.halo])
    ei = torch.cat([d.edge_index, d.cross_edge_index], 1)
    pairs = torch.cat([ei, ei.flip(0)], 1)
    pairs = pairs[:, (pairs[0] < n) & (pairs[0] != pairs[1])]
    return torch.unique(torch.stack([pairs[0], gid[pairs[1]]]), dim=1)


def tokens(global_ids: torch.Tensor, key: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(key)
    a = int(torch.randint(1, PRIME - 1, (1,), generator=g))
    b = int(torch.randint(0, PRIME - 1, (1,), generator=g))
    return (global_ids.long() * a + b) % PRIME


def share_embeddings(state, global_weights: dict, p: FedGNNParams):
    """Client side of step 1: h^L of every owned node [n, h] and the id tokens: ``self`` [n] (each
    node's own id) and ``neighbours`` [2, P] (row, token of a neighbour's id)."""
    from fgx.algorithms.swift_fedgnn import hidden_embeddings

    state.model.load_state_dict(global_weights)
    state.model.eval()
    with torch.no_grad():
        h = hidden_embeddings(state.model, state.view, p.share_layer)[-1]
    pairs, key = state.pairs, state.key
    return h.cpu(), {"self": tokens(state.ids, key),
                     "neighbours": torch.stack([pairs[0], tokens(pairs[1], key)])}


def match(uploads: list[dict], cap: int | None) -> list[tuple[torch.Tensor, list]]:
    """Server side of step 2. ``uploads[j]`` = {"self", "neighbours"} tokens of client j. Returns per
    client i: (its rows n that get a remote neighbour [m], the (client j, row w) of each [m]), for
    every w of another client listing n's token among its neighbours and not itself a node of i; each
    (n, w) once, in (j, w) order, at most ``cap`` per n."""
    owners: dict[int, list[tuple[int, int]]] = defaultdict(list)
    own_sets = []
    for c, up in enumerate(uploads):
        own_sets.append(set(up["self"].tolist()))
        for row, t in enumerate(up["self"].tolist()):
            owners[t].append((c, row))
    found: list[dict[int, set]] = [defaultdict(set) for _ in uploads]
    for j, up in enumerate(uploads):
        own_j = up["self"].tolist()
        for w, t in up["neighbours"].t().tolist():
            for i, n in owners.get(t, ()):
                if i != j and own_j[w] not in own_sets[i]:
                    found[i][n].add((j, w))
    out = []
    for f in found:
        rows, sources = [], []
        for n in sorted(f):
            for src in sorted(f[n])[:cap]:
                rows.append(n)
                sources.append(src)
        out.append((torch.tensor(rows, dtype=torch.long), sources))
    return out


def expanded_forward(model, view, expansion: dict | None, layer: int) -> torch.Tensor:
    """The model on the view where, before layer ``layer``, the received embeddings join as virtual
    nodes linked to their local node (both directions); other layers see the subgraph alone."""
    s = model.encode(view)
    h, e = s["h"], s["e"]
    n = view.num_nodes
    for i in range(model.num_layers):
        if i == layer and expansion is not None and expansion["nodes"].numel():
            m = expansion["nodes"].numel()
            virt = torch.arange(n, n + m, device=h.device)
            at = expansion["nodes"].to(h.device)
            ei = torch.cat([view.edge_index, torch.stack([virt, at]), torch.stack([at, virt])], 1)
            pre, e = model.layer(i, torch.cat([h, expansion["embeddings"].to(h.dtype)], 0), e, ei)
            pre = pre[:n]
        else:
            pre, e = model.layer(i, h, e, view.edge_index)
        h = model.activate(i, pre)
    return model.head(h, e, view.edge_index, view)


@dataclass
class FedGNNClient(ClientState):
    pairs: torch.Tensor | None = None        # [2, P] (owned row, global id of a neighbour) of the client's graph
    ids: torch.Tensor | None = None          # [n] global ids of the owned nodes
    key: int = 0                             # the clients' shared hashing key (never sent)
    expansion: dict | None = None            # the received neighbours: {"nodes" [m], "embeddings" [m, h]}


@dataclass
class Expanded(SeededDropout):
    """FedAvg's local steps on the expanded subgraph (``expanded_forward``), dropout seeded by round and client."""
    share_layer: int = 0
    unbatched = "its forward runs each client's expanded subgraph"

    def forward(self, state):
        return None, expanded_forward(state.model, state.view, state.expansion, self.share_layer)


@ALGORITHMS.register("fedgnn", params=FedGNNParams, tasks=("node",))
class FedGNN(FedAvg):
    messages = {"global_weights": Message("down"), "update": Message("up", release=True),
                "node_embeddings": Message("up"), "id_tokens": Message("up"),
                "expanded_neighbours": Message("down")}
    client_state = FedGNNClient
    objective = Expanded

    @classmethod
    def check_config(cls, params, validated) -> None:
        if params.fanouts:
            raise ConfigError("algorithm.fanouts", params.fanouts, "null: FedGNN runs on the whole expanded subgraph")

    def setup(self) -> None:
        super().setup()
        p = self.params
        model = self.global_model
        if not isinstance(model, LayerwiseModel) or model.num_layers <= p.share_layer:
            layers = getattr(model, "num_layers", None)
            raise ConfigError("algorithm.share_layer", p.share_layer,
                              f"< the model's number of message-passing layers ({layers}); FedGNN needs a "
                              f"layer-wise model (gcn, sage, gin) whose layer L receives the shared embeddings")
        key = int(torch.randint(0, 2**62, (1,), generator=torch.Generator().manual_seed(self.ctx.seed + 97)))
        for s, c in zip(self.states, self.ctx.clients):
            s.pairs = neighbour_pairs(c)
            s.ids = c.nodes[: c.num_owned]
            s.key = key            # shared by the clients, never sent
        self.expanded_at = None

    def expand(self, r: int) -> dict[str, float]:
        ch, p = self.ctx.channel, self.params
        gw = flat_params(self.global_model)
        ups = self.ctx.executor.map(share_embeddings, self.states, gw, p)
        ups = [(ch.send("node_embeddings", h, src=s.cid, dst="server", round=r),
                ch.send("id_tokens", t, src=s.cid, dst="server", round=r)) for s, (h, t) in zip(self.states, ups)]
        matched = match([t for _, t in ups], p.max_expanded)
        added = []
        for s, (rows, sources) in zip(self.states, matched):
            dim = ups[0][0].size(1)
            emb = torch.stack([ups[j][0][w] for j, w in sources]) if sources else torch.zeros(0, dim)
            got = ch.send("expanded_neighbours", {"nodes": rows, "embeddings": emb}, src="server", dst=s.cid, round=r)
            s.expansion = {"nodes": got["nodes"].to(self.ctx.device),
                           "embeddings": got["embeddings"].to(self.ctx.device)}
            added.append(int(rows.numel()))
        self.expanded_at = r
        self.ctx.record("fedgnn_expansion", {"virtual_nodes": added})
        return {"virtual_nodes": float(sum(added))}

    def client_objective(self, chosen, weights, r):
        return Expanded(round_seed(self.ctx.seed, r), self.params.share_layer)

    def round(self, r: int) -> dict[str, float]:
        """FedAvg's round, after a fresh expansion when one is due (the paper's steps 1 and 2 come first)."""
        p = self.params
        expansion = {}
        if self.expanded_at is None or (p.expand_every > 0 and (r - 1) % p.expand_every == 0):
            expansion = self.expand(r)
        return {**super().round(r), **expansion}

    def score(self, client, model):
        """The model on the client's expanded subgraph."""
        s = self.states[client.cid]
        return expanded_forward(model, s.view, s.expansion, self.params.share_layer)

    def state_dict(self) -> dict:
        return {**super().state_dict(), "expanded_at": self.expanded_at,
                "expansions": [s.expansion for s in self.states]}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.expanded_at = state["expanded_at"]
        for s, e in zip(self.states, state["expansions"]):
            s.expansion = e
