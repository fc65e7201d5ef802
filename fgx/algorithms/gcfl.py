"""GCFL (Xie et al., NeurIPS 2021, "Federated graph classification over non-IID graphs"): clustered
FedAvg. Clients train from their cluster's model and send their weight update dW. A cluster is
bi-partitioned when it looks converged as a whole but not per client: the norm of its mean update is
below eps1 while its largest client update is above eps2 (and it has more than two clients, after
`warmup_rounds`: the code's 20 of its 200 rounds, so by default a tenth of the run's rounds). The
split is the minimum cut of the clients' pairwise cosine-similarity graph of updates; updates are then averaged inside each cluster only. GCFL+ (algorithm=gcfl_plus) splits on
the DTW distances of the clients' sequences of update norms instead.

On the graph task clusters share the message-passing layers only, as the authors' code
(Oxfordblue7/GCFL: the server model is ``serverGIN``, its ``graph_convs``); each client keeps its input
layer and head. On node and edge tasks the whole model is shared."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from fgx.algorithms.base import add_delta, aggregation_weights, copy_model, mean_loss, weighted_average
from fgx.algorithms.fedavg import FedAvg, FedAvgParams
from fgx.config import ConfigError, spec
from fgx.federation.channel import Message
from fgx.federation.client import local_update, round_seed
from fgx.registry import ALGORITHMS


@dataclass
class GCFLParams(FedAvgParams):
    eps1: float = field(default=0.05, metadata=spec(min=0.0, help="split if ||mean update|| < eps1 ..."))
    eps2: float = field(default=0.1, metadata=spec(min=0.0, help="... and max client ||update|| > eps2"))
    warmup_rounds: int | None = field(default=None, metadata=spec(
        min=0, help="no split before this round; null: rounds // 10 (GCFL code: 20 of its 200 rounds)"))


def flatten(delta: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([v.flatten() for v in delta.values() if v.is_floating_point()])


def min_cut_bipartition(similarity: torch.Tensor) -> tuple[list[int], list[int]]:
    """Two groups of positions: the global minimum cut (Stoer–Wagner, networkx) of the complete
    graph weighted by similarity. Cosines lie in [-1, 1] and the cut needs non-negative weights, so
    they are mapped to (1 + cos) / 2, which keeps their order."""
    return min_cut((1 + similarity) / 2)


def min_cut(weights: torch.Tensor) -> tuple[list[int], list[int]]:
    """The global minimum cut (Stoer–Wagner, networkx) of the complete graph with these non-negative
    edge weights: two sorted lists of positions."""
    import networkx as nx

    n = weights.size(0)
    g = nx.Graph()
    for i in range(n):
        for j in range(i + 1, n):
            g.add_edge(i, j, weight=float(weights[i, j]))
    _, (a, b) = nx.stoer_wagner(g)
    return sorted(a), sorted(b)


@ALGORITHMS.register("gcfl", params=GCFLParams, tasks=("node", "edge", "graph"))
class GCFL(FedAvg):
    needs_individual_updates = "GCFL clusters clients by the cosine similarity of their individual updates"
    messages = {"cluster_weights": Message("down"), "update": Message("up", release=True)}

    @classmethod
    def check_config(cls, params, validated) -> None:
        super().check_config(params, validated)
        if params.client_fraction != 1.0:
            raise ConfigError("algorithm.client_fraction", params.client_fraction,
                              "1.0 for gcfl: clusters are split on every client's update")
        rounds = validated.top.rounds
        if params.warmup_rounds is not None and params.warmup_rounds >= rounds:
            raise ConfigError("algorithm.warmup_rounds", params.warmup_rounds,
                              f"< rounds ({rounds}): with no round after the warm-up GCFL never uses a split and "
                              f"is FedAvg (null: rounds // 10)")
        if params.warmup_rounds is None:
            params.warmup_rounds = rounds // 10

    @classmethod
    def reduces_to(cls, params, top) -> str | None:
        if params.warmup_rounds is not None and top.rounds <= params.warmup_rounds:
            return (f"fedavg: rounds {top.rounds} ≤ warmup_rounds {params.warmup_rounds}, so no cluster splits "
                    f"before the run ends")
        return None

    def setup(self) -> None:
        super().setup()
        self.clusters: list[list[int]] = [[s.cid for s in self.states]]
        self.cluster_models = [self.global_model]
        self.first_split: int | None = None
        self.warmup = self.params.warmup_rounds      # null resolved in check_config
        self.ctx.log.info("gcfl: clusters may split from round %d of %d", max(self.warmup, 1), self.ctx.rounds)

    def cluster_of(self, cid: int) -> int:
        return next(i for i, c in enumerate(self.clusters) if cid in c)

    def shared_keys(self) -> list[str]:
        """The state keys clusters share. Graph task: the message-passing layers only, as GCFL's code
        (its server model holds only ``graph_convs``; input layer, head and readout stay with each
        client). Node and edge tasks: the whole model (fgx's adaptation)."""
        keys = list(self.global_model.state_dict())
        if self.ctx.info.task != "graph":
            return keys
        prefixes = tuple(self.global_model.encoder_prefixes())
        return [k for k in keys if k.startswith(prefixes)]

    def round(self, r: int) -> dict[str, float]:
        """Clustered rounds: every cluster runs FedAvg's phases on its own model, then a cluster may split
        (the paper changes the round: one model per cluster, a split decided on all the clusters' updates)."""
        p, ch = self.params, self.ctx.channel
        seed = round_seed(self.ctx.seed, r)
        keys = self.__dict__.setdefault("_shared", self.shared_keys())
        losses, received = [], []
        for k in range(len(self.clusters)):       # every client trains from its cluster's model
            members = [self.states[i] for i in self.clusters[k]]
            sd = self.cluster_models[k].state_dict()
            w = ch.broadcast("cluster_weights", {n: sd[n].detach().clone() for n in keys}, [s.cid for s in members], r)
            updates = self.ctx.executor.map(local_update, members, w, p, seed, self.client_objective(members, w, r))
            deltas = [ch.send("update", u.delta, src=s.cid, dst="server", round=r) for s, u in zip(members, updates)]
            losses += [u.loss.loss for u in updates]
            received.append((members, deltas))
        self.observe(received, r)
        splits, ratios = 0, []
        for k, (members, deltas) in enumerate(received):
            model = self.cluster_models[k]
            weights = aggregation_weights(members, p.weighting, at_least_one=True)
            flat = torch.stack([flatten(d) for d in deltas])
            mean_norm = float(flat.mean(0).norm())
            max_norm = float(flat.norm(dim=1).max())
            ratios.append((mean_norm / p.eps1 if p.eps1 > 0 else math.inf, max_norm / p.eps2 if p.eps2 > 0 else math.inf))
            cut = None
            if r >= self.warmup and len(members) > 2 and mean_norm < p.eps1 and max_norm > p.eps2:
                cut = self.bipartition(members, flat)
            if cut is not None:
                a, b = cut
                self.clusters[k] = [members[i].cid for i in a]
                self.clusters.append([members[i].cid for i in b])
                self.cluster_models.append(copy_model(model))
                groups = [(k, a), (len(self.clusters) - 1, b)]
                splits += 1
                self.ctx.log.info("gcfl: round %d split cluster %d into %s and %s", r, k, self.clusters[k],
                                  self.clusters[-1])
            else:
                groups = [(k, list(range(len(members))))]
            for ck, idx in groups:
                avg = ch.aggregate("update", weighted_average([deltas[i] for i in idx], [weights[i] for i in idx]),
                                   len(idx), r)
                add_delta(self.cluster_models[ck], avg)
        self.ctx.record("gcfl_clusters", {"clusters": [sorted(c) for c in self.clusters]})
        closest = min(ratios)          # the cluster nearest the split condition
        if splits and self.first_split is None:
            self.first_split = r
        return {"loss": mean_loss(losses), "clusters": float(len(self.clusters)), "splits": float(splits),
                # NaN until a cluster splits: fgx report's column is empty ("-") for a run that never split
                "first_split_round": float(self.first_split) if self.first_split is not None else math.nan,
                "mean_norm_over_eps1": closest[0], "max_norm_over_eps2": closest[1]}

    def observe(self, received: list, r: int) -> None:
        """Hook: every cluster's (members, updates) of this round, before any split (GCFL+ keeps its
        sequences of update norms here)."""

    def bipartition(self, members: list, flat: torch.Tensor) -> tuple[list[int], list[int]] | None:
        """Positions of the two new clusters: the minimum cut of the updates' cosine similarities."""
        return min_cut_bipartition(torch.nn.functional.cosine_similarity(flat[:, None, :], flat[None, :, :], dim=-1))

    def model_for(self, client):
        m = self.cluster_models[self.cluster_of(client.cid)]
        if self.ctx.info.task != "graph":
            return m
        # the client's own input layer and head with its cluster's shared layers (what the next
        # round's cluster_weights message sets)
        own = self.states[client.cid].model
        sd = m.state_dict()
        own.load_state_dict({k: sd[k] for k in self.__dict__.setdefault("_shared", self.shared_keys())}, strict=False)
        return own

    def state_dict(self) -> dict:
        return {"clusters": [list(c) for c in self.clusters],
                "cluster_models": [m.state_dict() for m in self.cluster_models],
                "optimizers": [s.optimizer.state_dict() for s in self.states],
                # each client's own model: what a download leaves (e.g. BatchNorm statistics) is its state too
                "client_models": [s.model.state_dict() for s in self.states], "first_split": self.first_split}

    def load_state_dict(self, state: dict) -> None:
        self.clusters = [list(c) for c in state["clusters"]]
        self.first_split = state.get("first_split")
        self.cluster_models = [copy_model(self.global_model) for _ in state["cluster_models"]]
        for m, sd in zip(self.cluster_models, state["cluster_models"]):
            m.load_state_dict(sd)
        self.global_model = self.cluster_models[0]
        for s, o, m in zip(self.states, state["optimizers"], state["client_models"]):
            s.model.load_state_dict(m)
            s.optimizer.load_state_dict(o)
