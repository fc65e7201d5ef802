"""GCFL (Xie et al., NeurIPS 2021, "Federated graph classification over non-IID graphs"): clustered
FedAvg. Clients train from their cluster's model and send their weight update dW. A cluster is
bi-partitioned when it looks converged as a whole but not per client: the norm of its mean update is
below eps1 while its largest client update is above eps2 (and it has more than two clients, after
`warmup_rounds`). The split is the minimum cut of the clients' pairwise cosine-similarity graph of
updates; updates are then averaged inside each cluster only. (The GCFL+ DTW variant is not built.)"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fgx.algorithms.base import copy_model, flat_params, num_train_items, round_seed, weighted_average
from fgx.algorithms.fedavg import FedAvg, FedAvgParams
from fgx.config import ConfigError, spec
from fgx.federation.channel import Message
from fgx.registry import ALGORITHMS


@dataclass
class GCFLParams(FedAvgParams):
    eps1: float = field(default=0.05, metadata=spec(min=0.0, help="split if ||mean update|| < eps1 ..."))
    eps2: float = field(default=0.1, metadata=spec(min=0.0, help="... and max client ||update|| > eps2"))
    warmup_rounds: int = field(default=20, metadata=spec(min=0, help="no split before this round (GCFL code: 20)"))


def flatten(delta: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([v.flatten() for v in delta.values() if v.is_floating_point()])


def min_cut_bipartition(similarity: torch.Tensor) -> tuple[list[int], list[int]]:
    """Two groups of positions: the global minimum cut (Stoer–Wagner, networkx) of the complete
    graph weighted by similarity. Cosines lie in [-1, 1] and the cut needs non-negative weights, so
    they are mapped to (1 + cos) / 2, which keeps their order."""
    import networkx as nx

    n = similarity.size(0)
    g = nx.Graph()
    for i in range(n):
        for j in range(i + 1, n):
            g.add_edge(i, j, weight=float((1 + similarity[i, j]) / 2))
    _, (a, b) = nx.stoer_wagner(g)
    return sorted(a), sorted(b)


@ALGORITHMS.register("gcfl", params=GCFLParams, tasks=("node", "edge", "graph"))
class GCFL(FedAvg):
    messages = {"cluster_weights": Message("down"), "update": Message("up", release=True)}

    @classmethod
    def check_config(cls, params, validated) -> None:
        super().check_config(params, validated)
        if params.client_fraction != 1.0:
            raise ConfigError("algorithm.client_fraction", params.client_fraction,
                              "1.0 for gcfl: clusters are split on every client's update")

    def setup(self) -> None:
        super().setup()
        self.clusters: list[list[int]] = [[s.cid for s in self.states]]
        self.cluster_models = [self.global_model]

    def cluster_of(self, cid: int) -> int:
        return next(i for i, c in enumerate(self.clusters) if cid in c)

    def round(self, r: int) -> dict[str, float]:
        p, ch = self.params, self.ctx.channel
        seed = round_seed(self.ctx.seed, r)
        losses, splits = [], 0
        for k in range(len(self.clusters)):
            members = [self.states[i] for i in self.clusters[k]]
            model = self.cluster_models[k]
            w = ch.broadcast("cluster_weights", flat_params(model), [s.cid for s in members], r)
            results = self.ctx.executor.map(type(self).client_fn, members, w, p, seed)
            deltas = [ch.send("update", d, src=s.cid, dst="server", round=r) for s, (d, _) in zip(members, results)]
            losses += [l for _, l in results if l == l]
            weights = [max(num_train_items(s), 1) if p.weighting == "train_items" else 1.0 for s in members]
            flat = torch.stack([flatten(d) for d in deltas])
            mean_norm = float(flat.mean(0).norm())
            max_norm = float(flat.norm(dim=1).max())
            if r >= p.warmup_rounds and len(members) > 2 and mean_norm < p.eps1 and max_norm > p.eps2:
                sim = torch.nn.functional.cosine_similarity(flat[:, None, :], flat[None, :, :], dim=-1)
                a, b = min_cut_bipartition(sim)
                self.clusters[k] = [members[i].cid for i in a]
                self.clusters.append([members[i].cid for i in b])
                self.cluster_models.append(copy_model(model))
                groups = [(k, a), (len(self.clusters) - 1, b)]
                splits += 1
            else:
                groups = [(k, list(range(len(members))))]
            for ck, idx in groups:
                avg = ch.aggregate("update", weighted_average([deltas[i] for i in idx], [weights[i] for i in idx]),
                                   len(idx), r)
                m = self.cluster_models[ck]
                m.load_state_dict({n: (v + avg[n]) if v.is_floating_point() else avg[n]
                                   for n, v in m.state_dict().items()})
        self.ctx.record("gcfl_clusters", {"clusters": [sorted(c) for c in self.clusters]})
        return {"loss": float(sum(losses) / len(losses)) if losses else float("nan"),
                "clusters": float(len(self.clusters)), "splits": float(splits)}

    def model_for(self, client):
        return self.cluster_models[self.cluster_of(client.cid)]

    def state_dict(self) -> dict:
        return {"clusters": [list(c) for c in self.clusters],
                "cluster_models": [m.state_dict() for m in self.cluster_models],
                "optimizers": [s.optimizer.state_dict() for s in self.states]}

    def load_state_dict(self, state: dict) -> None:
        self.clusters = [list(c) for c in state["clusters"]]
        self.cluster_models = [copy_model(self.global_model) for _ in state["cluster_models"]]
        for m, sd in zip(self.cluster_models, state["cluster_models"]):
            m.load_state_dict(sd)
        self.global_model = self.cluster_models[0]
        for s, o in zip(self.states, state["optimizers"]):
            s.optimizer.load_state_dict(o)
