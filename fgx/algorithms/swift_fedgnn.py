"""Swift-FedGNN (Qiu, Luo, Liu, Shroff; ICLR 2025 submission, OpenReview QXwtkVI8Yr / W8NolHzJQc):
mostly local training, with a periodic cross-client iteration on a few sampled clients.

What fgx runs (spec ce_fedgnn.md §5 item 3):
- Every iteration every participating client takes one optimiser step on its own subgraph with the
  cross-client edges ignored: exactly FedAvg's local step (same view, batches, sampler, seeds).
- Iterations are counted across rounds, t = (r - 1) * K + k (K = ``local_steps``, k = 1..K). At every
  t that is a multiple of ``period`` (I) the server samples ``clients_per_cross_round`` of the round's
  clients; each of them takes that iteration's step on its local data **plus its dependent nodes in
  other clients**; the other clients take their ordinary local step.
- The dependent nodes' information reaches a sampled client only as aggregates. For each of its
  boundary nodes v (an owned node with a remote neighbour) and each shared layer l, every remote client
  j sums over ITS nodes u adjacent to v the layer-l embedding h_u^l (computed by j, now, with j's current
  local model on j's own subgraph, in eval mode, no gradient) and uploads the partial sums
  (``partial_aggregates``); the server adds them over the remote clients and sends the sampled client
  one row per boundary node and layer (``aggregates``). Which nodes a remote client must sum for, the
  server tells it (``cross_request``: global node ids only), from the partition (the same knowledge
  CE-FedGNN's embedding routing uses).
- FedAvg model averaging at the end of the round (``update`` / ``global_weights``, FedAvg's weighting
  and client sampling). Evaluation is FedAvg's: the global model on each client's own subgraph.

Decisions where the paper text was not available (fgx's reference search found the OpenReview
abstracts and one review, not Section 4 or the algorithm box; its code search found no public code; the
method summary above is the fgx spec's):
- **Layers.** ``remote_layer0: drop`` (default) shares hidden aggregates only (layers 1..L-1 feed
  layers 2..L; a remote neighbour's raw features never leave its client): for fgx's 2-layer GNNs the
  cross-client information enters the second (output) layer, as CE-FedGNN's default
  ``remote_layer0=drop`` does. ``remote_layer0: aggregate`` also shares layer 0, i.e. sums of remote
  neighbours' RAW features (the paper's "features/embeddings"); a sum over one neighbour is that
  neighbour's feature row, so, following FedGCN's precedent, those kinds (``partial_feature_sums``,
  ``feature_sums``) are declared raw and the run is refused unless ``dataset.features_public=true``.
  A 1-layer model with ``drop`` has nothing to share and is refused.
- **How the client uses an aggregate.** Boundary node v with k_v remote neighbours gets one extra
  "virtual" neighbour whose row is the received sum divided by k_v (k_v the client knows from its own
  cross edges), joined to v by k_v parallel edges. For sum/mean aggregators this gives exactly the
  output that the individual remote rows would (GIN, SAGE; GCN with CE-FedGNN's halo normalisation,
  remote neighbours of degree 1); tested. The remote rows are constants (no gradient crosses clients),
  and the remote 2-hop neighbourhood stops at the remote client's border (its embeddings come from its
  own subgraph, as in its local training).
- **Which remote model.** The remote client's current local model (it is at the same iteration); a
  client not in this round (``client_fraction`` < 1) uses the model it last held.
- **What is sampled.** A fresh uniform sample of the round's clients at each cross-client iteration
  (a sampled client without remote neighbours takes a local step); ``period: 8`` and
  ``clients_per_cross_round: max(1, N // 4)`` are fgx decisions (spec), not the paper's values.
  All boundary nodes of a sampled client are served (no remote neighbour sampling); the cross step
  runs on the client's whole subgraph (``fanouts``, if set, applies to the local steps only), its loss
  on the step's batch of training nodes (``batch_size``) as a local step would.
- **Edge tasks (AML).** fgx's edge models (GINE, PNA) transform each message with its edge's attributes
  before aggregating (PNA also takes min/max/std), and an edge readout needs each remote endpoint's own
  embedding, so neither can be fed a per-node sum. On edge tasks the cross-client step therefore gets the
  individual layer-1..L embeddings of the client's halo nodes (the remote endpoints of its cross-client
  transactions), computed now by their owners with their current local models (``boundary_embeddings``
  up, ``halo_embeddings`` down; fgx/algorithms/halo.py); local steps see the halo nodes as featureless
  endpoints, as FedAvg does. ``remote_layer0=aggregate`` is refused there.

``swift_cross.jsonl`` records, per round, each cross-client iteration t, the clients sampled and the
clients that received aggregates. With ``period`` larger than rounds * K no cross step ever happens
and the run equals ``algorithm=fedavg`` with the same keys, metric for metric (tested)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fgx.algorithms.base import flat_params
from fgx.algorithms.fedavg import FedAvg, FedAvgParams
from fgx.algorithms.halo import HaloClient, apply_halo_rows, send_halo_embeddings, wrap_edge_clients
from fgx.config import ConfigError, spec
from fgx.federation.channel import Message
from fgx.federation.client import ClientUpdate, LocalLoss, Objective, local_training, round_seed, state_delta
from fgx.registry import ALGORITHMS

RAW_REASON = ("Swift-FedGNN with remote_layer0=aggregate: sums of remote neighbours' raw features; a sum over "
              "one neighbour equals that neighbour's feature row (only for datasets declaring public features)")
PHASE_SEED = 7919           # phase p of a round seeds its generator with round_seed + cid + p * PHASE_SEED


@dataclass
class SwiftFedGNNParams(FedAvgParams):
    period: int = field(default=8, metadata=spec(
        min=1, help="I: every I-th iteration (counted across rounds) is a cross-client iteration"))
    clients_per_cross_round: int | None = field(default=None, metadata=spec(
        min=1, help="clients sampled at each cross-client iteration; null: max(1, N // 4)"))
    remote_layer0: str = field(default="drop", metadata=spec(
        choices=["drop", "aggregate"],
        help="drop: only hidden-layer aggregates cross; aggregate: also raw-feature sums (public features only)"))

    def validate(self, prefix: str) -> None:
        if self.local_epochs is not None:
            raise ConfigError(f"{prefix}.local_epochs", self.local_epochs,
                              "null for swift_fedgnn (clients step in lock-step iterations: use local_steps)")


# -- client side (module-level functions: an executor may run them where the client lives) ----------
def cross_structure(client) -> dict[str, torch.Tensor]:
    """What a client needs for Swift-FedGNN's cross steps, from its own partition data: its boundary
    nodes, their remote-neighbour counts, the virtual-neighbour edges, and its (owned, remote) pairs."""
    d, n = client.data, client.num_owned
    a, b = d.cross_edge_index
    owned, halo = torch.where(a < n, a, b), torch.where(a < n, b, a)
    pairs = torch.unique(torch.stack([owned, halo]), dim=1)     # each owned–remote adjacency once
    boundary, pos, count = torch.unique(pairs[0], return_inverse=True, return_counts=True)
    virtual = torch.stack([n + pos, pairs[0]])                  # k_v parallel edges: virtual(v) -> v
    return {"boundary": boundary, "boundary_gid": client.nodes[boundary], "count": count,
            "virtual_edges": virtual, "pair_owned": pairs[0], "pair_remote_gid": client.halo[pairs[1] - n]}


def hidden_embeddings(model, view, upto: int) -> list[torch.Tensor]:
    """Post-activation embeddings h^1..h^upto of the view's nodes (layer-wise interface)."""
    s = model.encode(view)
    h, e = s["h"], s["e"]
    out = []
    for i in range(upto):
        pre, e = model.layer(i, h, e, view.edge_index)
        h = model.activate(i, pre)
        out.append(h)
    return out


def partial_aggregates(state, requests: dict, n_hidden: int, with_features: bool):
    """Remote-client side: for each requested global node id v, the sum over this client's nodes u
    adjacent to v of h_u^l (l = 1..n_hidden, current local model, eval mode) and, if asked, of x_u."""
    req = requests.get(state.cid)
    if req is None:
        return None, None
    sw = state.swift
    dev = state.view.x.device
    req = req.to(dev)
    pos = torch.searchsorted(req, sw["pair_remote_gid"]).clamp(max=req.numel() - 1)
    keep = req[pos] == sw["pair_remote_gid"]
    rows, src = pos[keep], sw["pair_owned"][keep]
    hidden = raw = None
    if n_hidden:
        was = state.model.training
        state.model.eval()
        with torch.no_grad():
            hs = hidden_embeddings(state.model, state.view, n_hidden)
        state.model.train(was)
        hidden = {"ids": req, "h": [torch.zeros(req.numel(), h.size(1), dtype=h.dtype, device=dev)
                                    .index_add_(0, rows, h[src]) for h in hs]}
    if with_features:
        x = state.view.x.float()
        raw = {"ids": req, "x": torch.zeros(req.numel(), x.size(1), device=dev).index_add_(0, rows, x[src])}
    return hidden, raw


def cross_forward(model, view, sw: dict, remote: dict[int, torch.Tensor]) -> torch.Tensor:
    """The model on the client's subgraph where, before layer i, each boundary node v gets one virtual
    neighbour carrying ``remote[i][pos(v)]`` (the mean of its remote neighbours' layer-i inputs) over
    k_v parallel edges; layers without an entry in ``remote`` see the owned subgraph only."""
    n = view.num_nodes
    s = model.encode(view)
    h, e = s["h"], s["e"]
    with_virtual = torch.cat([view.edge_index, sw["virtual_edges"]], 1)
    for i in range(model.num_layers):
        rows = remote.get(i)
        if rows is not None:
            pre, e = model.layer(i, torch.cat([h, rows.to(h.dtype)], 0), e, with_virtual)
            pre = pre[:n]
        else:
            pre, e = model.layer(i, h, e, view.edge_index)
        h = model.activate(i, pre)
    return model.head(h, e, view.edge_index, view)


def cross_step(state, got: dict, p: SwiftFedGNNParams, g: torch.Generator) -> float:
    """One optimiser step with the received aggregates (sums per boundary node and layer); on edge
    tasks with the received halo embeddings (one row per halo node and layer)."""
    if state.task == "edge":
        apply_halo_rows(state, got)
        try:
            return local_training(state, 1, p.batch_size, g, fanouts=p.fanouts).loss
        finally:
            state.model.clear()
    dev = state.view.x.device
    k = state.swift["count"].to(dev).unsqueeze(1).float()
    remote = {layer: (rows.to(dev).float() / k) for layer, rows in got.items()}
    return local_training(state, 1, p.batch_size, g, CrossAggregates(remote)).loss


@dataclass
class CrossAggregates(Objective):
    """A cross step's forward (node tasks): the client's subgraph with each boundary node's received
    means as a virtual neighbour before every layer they exist for (``cross_forward``)."""
    remote: dict                      # layer index -> [B, d] mean of the remote neighbours' layer inputs
    unbatched = "its forward adds each client's received aggregates as virtual neighbours"

    def forward(self, state):
        return None, cross_forward(state.model, state.view, state.swift, self.remote)


@dataclass
class SwiftClient(HaloClient):
    swift: dict | None = None            # node tasks: the client's cross structure (cross_structure)
    swift_losses: list | None = None     # (mean loss, steps) of each stretch of this round's local steps


def client_phase(state, gw: dict, p: SwiftFedGNNParams, rseed: int, phase: int, cross, n_local: int,
                 finish: bool):
    """One stretch of a client's round: (phase 0) load the global weights; (phase > 0) the cross-client
    iteration that opens the phase: a cross step if this client got aggregates (``cross`` maps client ids
    to them), else a local step; then ``n_local`` local steps. The last phase returns the update."""
    if phase == 0:
        state.model.load_state_dict(gw)
        state.swift_losses = []
    g = torch.Generator().manual_seed(rseed + state.cid + phase * PHASE_SEED)
    losses = state.swift_losses
    steps = n_local
    if phase > 0:
        if state.cid in cross:
            losses.append((cross_step(state, cross[state.cid], p, g), 1))
        else:
            steps += 1
    if steps:
        losses.append((local_training(state, steps, p.batch_size, g, fanouts=p.fanouts).loss, steps))
    if not finish:
        return None
    delta = state_delta(state.model.state_dict(), gw)
    if len(losses) == 1:
        loss = losses[0][0]
    else:
        loss = sum(l * s for l, s in losses) / max(1, sum(s for _, s in losses)) if losses else float("nan")
    return ClientUpdate(delta, LocalLoss(loss, loss, 0.0))


# -- server side --------------------------------------------------------------------------------------
@ALGORITHMS.register("swift_fedgnn", params=SwiftFedGNNParams, tasks=("node", "edge"))
class SwiftFedGNN(FedAvg):
    """FedAvg whose local steps are interrupted by cross-client exchanges: the paper changes the round's
    order (exchanges between stretches of local steps), so ``round`` is its own."""
    objective = None                     # its clients run client_phase, not local_update
    client_state = SwiftClient
    messages = {**FedAvg.messages,
                "cross_request": Message("down"),                      # node ids a remote client sums for
                "partial_aggregates": Message("up", release=True),     # per-remote-client sums of h^l
                "aggregates": Message("down"),                         # server totals, one row per boundary node
                "partial_feature_sums": Message("up", raw=True, reason=RAW_REASON),
                "feature_sums": Message("down", raw=True, reason=RAW_REASON),
                # edge tasks: individual embeddings of the sampled clients' halo nodes
                "boundary_embeddings": Message("up", release=True),
                "halo_embeddings": Message("down")}

    @classmethod
    def check_config(cls, params, validated) -> None:
        if validated.entries["dataset"].meta.get("task") == "edge":
            if params.remote_layer0 != "drop":
                raise ConfigError("algorithm.remote_layer0", params.remote_layer0, "drop on an edge task (the edge "
                                  "models need each remote endpoint's own embedding, not sums)")
            return
        if params.remote_layer0 == "aggregate" and not validated.features_public:
            raise ConfigError("dataset.features_public", False,
                              "true for algorithm=swift_fedgnn with remote_layer0=aggregate: it sends sums of remote "
                              "neighbours' raw features, which equal a feature row for a single neighbour "
                              "(or use algorithm.remote_layer0=drop)")
        layers = getattr(validated.params["model"], "layers", None)
        if layers == 1 and params.remote_layer0 == "drop":
            raise ConfigError("algorithm.remote_layer0", "drop", "aggregate for a 1-layer model (with drop a "
                              "cross-client step would carry nothing), or model.layers >= 2")

    def setup(self) -> None:
        p, ctx = self.params, self.ctx
        if p.remote_layer0 == "aggregate" and not ctx.info.features_public:
            raise ConfigError("dataset.features_public", False,
                              "true for algorithm=swift_fedgnn with remote_layer0=aggregate: it sends sums of remote "
                              "neighbours' raw features, which equal a feature row for a single neighbour "
                              "(or use algorithm.remote_layer0=drop)")
        super().setup()
        if ctx.info.task == "edge":
            wrap_edge_clients(self)
            return
        for c, s in zip(ctx.clients, self.states):
            s.swift = {k: v.to(ctx.device) for k, v in cross_structure(c).items()}
        # server-side partition knowledge (as for CE-FedGNN's routing): boundary ids and halos per client
        self.boundary_gid = [s.swift["boundary_gid"].cpu() for s in self.states]
        self.halo = [torch.unique(c.halo) for c in ctx.clients]
        self.num_global = 1 + max(int(torch.cat([c.nodes, c.halo]).max()) for c in ctx.clients)
        self.n_hidden = self.global_model.num_layers - 1

    def cross_clients(self, t: int, chosen: list[int]) -> list[int]:
        m = self.params.clients_per_cross_round or max(1, len(self.states) // 4)
        m = min(m, len(chosen))
        g = torch.Generator().manual_seed(self.ctx.seed * 1_000_033 + t * 7_919 + 1)
        return sorted(chosen[i] for i in torch.randperm(len(chosen), generator=g)[:m].tolist())

    def exchange(self, r: int, sampled: list[int]) -> dict[int, dict[int, torch.Tensor]]:
        """The two-level aggregation for the sampled clients: requests down, partial sums up, totals down.
        Returns {sampled client id: {layer index i: [B, d] sums of the inputs of layer i}}."""
        ch, p = self.ctx.channel, self.params
        if self.ctx.info.task == "edge":
            return send_halo_embeddings(self, sampled, r, "boundary_embeddings", "halo_embeddings")
        dst = [i for i in sampled if self.boundary_gid[i].numel()]
        if not dst:
            return {}
        need_ids = torch.cat([self.boundary_gid[i] for i in dst])
        slot = torch.full((self.num_global,), -1, dtype=torch.long)
        slot[need_ids] = torch.arange(need_ids.numel())
        requests = {}
        for j, halo in enumerate(self.halo):
            ids = halo[slot[halo] >= 0]
            if ids.numel():
                requests[j] = ch.send("cross_request", ids, src="server", dst=j, round=r)
        with_x = p.remote_layer0 == "aggregate"
        parts = self.ctx.executor.map(partial_aggregates, [self.states[j] for j in requests], requests,
                                      self.n_hidden, with_x)
        totals: dict[int, torch.Tensor] = {}
        for j, (hidden, raw) in zip(requests, parts):
            got = []
            if hidden is not None:
                hidden = ch.send("partial_aggregates", hidden, src=j, dst="server", round=r)
                got += [(layer + 1, rows) for layer, rows in enumerate(hidden["h"])]
            if raw is not None:
                raw = ch.send("partial_feature_sums", raw, src=j, dst="server", round=r)
                got.append((0, raw["x"]))
            for layer, rows in got:
                ids = (hidden if layer else raw)["ids"].cpu()
                if layer not in totals:
                    totals[layer] = torch.zeros(need_ids.numel(), rows.size(1))
                totals[layer].index_add_(0, slot[ids], rows.detach().cpu().float())
        out = {}
        for i in dst:
            ids = self.boundary_gid[i]
            rows = slot[ids]
            out[i] = {}
            hidden_layers = [l for l in sorted(totals) if l > 0]
            if hidden_layers:
                got = ch.send("aggregates", {"ids": ids, "h": [totals[l][rows] for l in hidden_layers]},
                              src="server", dst=i, round=r)
                out[i].update(zip(hidden_layers, got["h"]))
            if 0 in totals:
                out[i][0] = ch.send("feature_sums", {"ids": ids, "x": totals[0][rows]},
                                    src="server", dst=i, round=r)["x"]
        return out

    def round(self, r: int) -> dict[str, float]:
        p, ch = self.params, self.ctx.channel
        chosen_ids = self.sample_clients(r)
        chosen = [self.states[i] for i in chosen_ids]
        gw = ch.broadcast("global_weights", flat_params(self.global_model), chosen_ids, r)
        K, rseed = p.local_steps, round_seed(self.ctx.seed, r)
        cross_ks = [k for k in range(1, K + 1) if ((r - 1) * K + k) % p.period == 0]
        # phases: [steps 1..k1-1] | exchange | [cross iteration k1, steps k1+1..k2-1] | exchange | ...
        bounds = [0] + cross_ks + [K + 1]
        results, cross = None, {}
        for phase in range(len(bounds) - 1):
            if phase > 0:
                t = (r - 1) * K + bounds[phase]
                sampled = self.cross_clients(t, chosen_ids)
                cross = self.exchange(r, sampled)
                self.ctx.record("swift_cross", {"iteration": t, "step": bounds[phase], "sampled": sampled,
                                                "received": sorted(cross)})
            n_local = bounds[phase + 1] - bounds[phase] - 1
            finish = phase == len(bounds) - 2
            results = self.ctx.executor.map(client_phase, chosen, gw, p, rseed, phase, cross, n_local, finish)
        combined, stats = self.aggregate(chosen, results, r)
        return {**stats, **self.server_update(combined, r), "cross_iterations": float(len(cross_ks))}
