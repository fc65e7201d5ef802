"""FedGCN (Yao et al., NeurIPS 2023): before training, one exchange of pre-aggregated neighbour
features; then FedAvg on a GCN over those features.

Setup (sent once, round 0): each client sends the server, for every node it owns or touches through
a cross-client edge, its partial sum of the node's closed neighbourhood features
sum_{u in N(v) ∪ {v}, u owned here} x_u. The server adds the partial sums per node and sends each
client the totals ((A + I) X rows) for the nodes it needs:
  hops=0: nothing (plain FedAvg on the local subgraphs),
  hops=1: its own nodes (1-hop information across clients),
  hops=2: its own nodes and their remote neighbours, kept with the cross-client edges (2-hop).
The paper encrypts the uploads homomorphically so the server learns only the totals; fgx does not,
and a sum over a single neighbour IS that neighbour's raw feature row, so both kinds are declared raw:
FedGCN with hops > 0 runs only on data declared `dataset.features_public=true`.

Edge tasks (AML, CE-FedGNN Table 1's FedGCN-GIN/PNA rows): AML's node features are constants, so
the paper adapts FedGCN to "share node embeddings once at initialization, never refresh" (spec
ce_fedgnn.md §5): with hops > 0, before training each client computes the layer-1..L embeddings of
its boundary nodes with the initial global model and uploads them (``boundary_embeddings``); the
server sends each client those of its halo nodes (``halo_embeddings``), which its model then uses as
constant remote-endpoint embeddings for the whole run (fgx/algorithms/halo.py). Then FedAvg."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fgx.algorithms.fedavg import FedAvg, FedAvgParams
from fgx.config import ConfigError, spec
from fgx.algorithms.halo import HaloClient, apply_halo_rows, send_halo_embeddings, wrap_edge_clients
from fgx.federation.channel import Message
from fgx.registry import ALGORITHMS

REASON = ("FedGCN's one-time exchange of neighbour feature sums (Yao et al. 2023); a sum over one "
          "neighbour equals that neighbour's raw features (the paper encrypts uploads; fgx does not)")


@dataclass
class FedGCNParams(FedAvgParams):
    hops: int = field(default=2, metadata=spec(choices=[0, 1, 2], help="L-hop communication (0 = FedAvg)"))


def neighbour_partial_sums(client) -> dict[str, torch.Tensor]:
    """This client's share of (A + I) X: rows for its owned nodes and its halo nodes, in global ids."""
    d, n = client.data, client.num_owned
    x = d.x.float()
    sums = torch.zeros_like(x)
    sums[:n] = x[:n]                                              # the self term (A + I)
    src, dst = d.edge_index                                       # internal edges, both directions
    sums.index_add_(0, dst, x[src])
    a, b = d.cross_edge_index                                     # one end owned, one end halo
    owned, halo = torch.where(a < n, a, b), torch.where(a < n, b, a)
    pairs = torch.unique(torch.stack([owned, halo]), dim=1)       # each owned–halo edge once
    sums.index_add_(0, pairs[1], x[pairs[0]])
    return {"ids": torch.cat([client.nodes, client.halo]), "sums": sums}


@ALGORITHMS.register("fedgcn", params=FedGCNParams, tasks=("node", "edge"))
class FedGCN(FedAvg):
    messages = {**FedAvg.messages,
                "neighbour_sums": Message("up", raw=True, reason=REASON),
                "aggregated_features": Message("down", raw=True, reason=REASON),
                # edge tasks: the initial model's embeddings of boundary nodes, once
                "cross_request": Message("down"),
                "boundary_embeddings": Message("up", release=True),
                "halo_embeddings": Message("down")}
    client_state = HaloClient     # edge tasks: wrap_edge_clients
    objective = None              # its setup's exchange is client work of its own

    @classmethod
    def check_config(cls, params, validated) -> None:
        super().check_config(params, validated)
        task = validated.entries["dataset"].meta.get("task")
        if task != "edge" and params.hops > 0 and not validated.features_public:
            raise ConfigError("dataset.features_public", False,
                              f"true for algorithm=fedgcn with hops={params.hops}: FedGCN sends neighbour feature "
                              f"sums, which equal raw feature rows for nodes with one neighbour in a client "
                              f"(or use algorithm.hops=0)")

    def setup(self) -> None:
        p, info = self.params, self.ctx.info
        if info.task == "edge":
            super().setup()
            wrap_edge_clients(self)
            if p.hops > 0:
                rows = send_halo_embeddings(self, [c.cid for c in self.ctx.clients], 0,
                                            "boundary_embeddings", "halo_embeddings")
                for cid, r in rows.items():
                    apply_halo_rows(self.states[cid], r)
            return
        if p.hops > 0 and not info.features_public:
            raise ConfigError("dataset.features_public", False,
                              f"true for algorithm=fedgcn with hops={p.hops}: FedGCN sends neighbour feature sums, "
                              f"which equal raw feature rows for nodes with one neighbour in a client "
                              f"(or use algorithm.hops=0)")
        super().setup()
        if p.hops > 0:
            self.exchange_aggregates()

    def make_views(self, include_cross: bool = False):
        return super().make_views(include_cross=self.params.hops == 2)

    def exchange_aggregates(self) -> None:
        """The one-time exchange (round 0): partial sums up, per-node totals down."""
        ch, clients = self.ctx.channel, self.ctx.clients
        parts = self.ctx.executor.map(neighbour_partial_sums, clients)
        parts = [ch.send("neighbour_sums", s, src=c.cid, dst="server", round=0) for c, s in zip(clients, parts)]
        num_nodes = 1 + max(int(s["ids"].max()) for s in parts if s["ids"].numel())
        totals = torch.zeros(num_nodes, parts[0]["sums"].size(1))
        for s in parts:
            totals.index_add_(0, s["ids"], s["sums"])
        for c in clients:
            view = self.views[c.cid]
            need = c.nodes if self.params.hops == 1 else torch.cat([c.nodes, c.halo])
            got = ch.send("aggregated_features", totals[need], src="server", dst=c.cid, round=0)
            view.x = got.to(view.x.device, view.x.dtype)

    def model_for(self, client):
        """Edge tasks: the global model with this client's received halo embeddings."""
        if self.ctx.info.task != "edge":
            return self.global_model
        model = self.states[client.cid].model
        model.load_state_dict(self.global_model.state_dict())
        return model
