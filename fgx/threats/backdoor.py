"""Backdoor attacks on federated graph learning (docs/threats.md, "Graph backdoors").

Malicious clients (a ``fraction`` of them, drawn by the run's seed) poison their own training data before
training: they put a trigger into some of their training items and set those items' labels to the
attacker's ``target`` class; they then train and send their updates like every other client (the server
sees nothing but updates, as in every run). The attack succeeds when the trained model classifies an
item carrying the trigger as the target class.

- ``graph_backdoor_cba`` / ``graph_backdoor_dba`` (graph classification; Xu et al. 2022, "More is Better
  (Mostly): On the Backdoor Attacks in Federated Graph Neural Networks"): an Erdős–Rényi subgraph trigger
  put into a share ``poison_rate`` of a malicious client's training graphs by subgraph replacement
  (fgx/threats/triggers.py). Centralised (CBA): every malicious client embeds the whole global trigger.
  Distributed (DBA): the global trigger's edges are split into one local trigger per malicious client,
  each embedding only its own. Both are tested with the whole global trigger.
- ``node_backdoor`` (node classification): a fixed trigger subgraph (Erdős–Rényi structure, features of
  the attacker's own nodes) attached to a share of a malicious client's training nodes, whose labels are
  set to the target (the subgraph-trigger attack UGBA (Dai et al. 2023) compares with, SBA-Samp; UGBA's
  own trigger generator, a bi-level optimisation against a surrogate GCN, is not built: docs/threats.md).

Attack success rate (``asr``): the share of the triggered test items whose true label is not the target
that the model scores as the target class, pooled over every client's test items (the attacker targets the
shared model). ``asr_clean`` is the same share on the same items without the trigger: what the attack
would score with no backdoor at all."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from fgx.config import ConfigError, spec
from fgx.data.base import DataError
from fgx.threats.triggers import attach_node_trigger, embed_in_graphs, er_trigger, graph_offsets, split_trigger

# algorithms whose model reads more of a graph than its features and edges as the client's view holds them
# (inputs computed once from each graph's structure at setup), or that score their own way: a trigger put
# into the view would not reach what the model reads, so the attack success rate would be wrong
_OWN_INPUTS = {"fedstar": "its structural encodings are computed from each graph at setup",
               "fedssp_graph": "its spectral inputs (eigenvalues, filters) are computed from each graph at setup"}


def choose_malicious(num_clients: int, fraction: float, seed: int) -> list[int]:
    """round(fraction * num_clients) client ids, at least one when fraction > 0, drawn by ``seed``."""
    k = min(num_clients, max(1 if fraction > 0 else 0, int(round(fraction * num_clients))))
    g = torch.Generator().manual_seed(seed * 1_000_003 + 7070)
    return sorted(torch.randperm(num_clients, generator=g)[:k].tolist())


def attack_generator(seed: int, salt: int = 0) -> torch.Generator:
    """The attacker's own random stream (trigger, poisoned items), apart from the run's."""
    return torch.Generator().manual_seed(seed * 7919 + 7000 + salt)


@dataclass
class BackdoorParams:
    fraction: float = field(default=0.2, metadata=spec(min=0.0, max=1.0, help="share of clients that are malicious"))
    target: int = field(default=0, metadata=spec(min=0, help="the class the trigger should make the model predict"))
    trigger_size: int = field(default=4, metadata=spec(min=2, help="nodes of the trigger subgraph"))
    density: float = field(default=0.8, metadata=spec(gt=0.0, max=1.0,
                                                      help="edge probability of the Erdős–Rényi trigger"))
    poison_rate: float = field(default=0.2, metadata=spec(gt=0.0, max=1.0,
                                                          help="share of a malicious client's training items poisoned"))


class Backdoor:
    """What the graph-level and node-level backdoors share: malicious clients by seed, the attack success
    rate from per-item hits, bootstrap replicates of it over the triggered items."""
    task = ""

    def __init__(self, params: BackdoorParams):
        self.params = params
        self.malicious: set[int] = set()
        self.poisoned: dict[int, int] = {}      # client id -> items poisoned
        self.last: dict | None = None           # the latest evaluation's hits and item ids

    @classmethod
    def check_config(cls, params: BackdoorParams, validated) -> None:
        task = validated.entries["dataset"].meta.get("task")
        if task is not None and task != cls.task:
            raise ConfigError("threat.name", validated.names.get("threat", cls.__name__),
                              f"a threat of the '{task}' task of dataset '{validated.names['dataset']}' "
                              f"(this backdoor attacks the '{cls.task}' task)")
        algo = validated.names["algorithm"]
        if algo in _OWN_INPUTS:
            raise ConfigError("algorithm", algo, f"an algorithm whose model reads the client's graphs as they are: "
                              f"{_OWN_INPUTS[algo]}, so a trigger would not reach it")
        from fgx.algorithms.base import Algorithm
        if validated.entries["algorithm"].obj.score is not Algorithm.score:
            raise ConfigError("algorithm", algo, "an algorithm that scores a client's view with its model "
                              "(this one scores its own way, which a trigger put into the view would not reach)")

    def _choose(self, clients: list, info, seed: int) -> list[int]:
        if self.params.target >= info.num_classes:
            raise DataError(f"threat.target={self.params.target}: dataset '{info.name}' has classes "
                            f"0..{info.num_classes - 1}")
        chosen = choose_malicious(len(clients), self.params.fraction, seed)
        self.malicious = set(chosen)
        return chosen

    def tamper(self, cids, deltas, r):
        """A backdoor poisons data only: malicious clients send what their training on it gave."""
        return deltas

    @staticmethod
    def model_of(algo, client):
        local = algo.ctx.config.top.eval_model == "local"
        m = algo.local_model_for(client) if local else algo.model_for(client)
        m.eval()
        return m

    def _result(self, hits: list, clean: list, ids: list) -> dict[str, float]:
        h, c = torch.cat(hits), torch.cat(clean)
        self.last = {"hits": h, "ids": torch.cat(ids)}
        n = h.numel()
        return {"asr": float(h.float().mean()) if n else float("nan"),
                "asr_clean": float(c.float().mean()) if n else float("nan"), "asr_items": float(n)}

    def replicates(self) -> dict | None:
        """Bootstrap replicates of the latest ``asr`` over its triggered items (distinct global ids, the draws
        of fgx/metrics.py shared across runs), encoded as summary.json keeps them; None before any evaluation."""
        from fgx.metrics import bootstrap_item_means, encode_replicates, split_key

        if self.last is None or self.last["hits"].numel() == 0:
            return None
        h = self.last["hits"].double()
        reps = bootstrap_item_means({"asr": h}, torch.zeros(h.numel(), dtype=torch.long), 1, items=self.last["ids"])
        return {"asr": encode_replicates(reps["asr"]), "split": split_key(self.last["ids"])}


class GraphBackdoor(Backdoor):
    """Xu et al. 2022's federated graph backdoor, centralised (``distributed`` False) or distributed."""
    task = "graph"
    distributed = False

    def poison_data(self, clients: list, info, seed: int) -> list:
        p = self.params
        chosen = self._choose(clients, info, seed)
        gen = attack_generator(seed)
        self.trigger = er_trigger(p.trigger_size, p.density, gen)
        local = split_trigger(self.trigger, len(chosen), gen) if self.distributed and chosen else \
            [self.trigger] * len(chosen)
        self.local_triggers = dict(zip(chosen, local))
        for cid in chosen:
            self.poisoned[cid] = poison_graphs(clients[cid].data, self.local_triggers[cid], p, gen)
        return clients

    def metrics(self, algo, evaluator) -> dict[str, float]:
        """The attack success rate of the global trigger on every client's test graphs whose label is not the
        target (and that have at least ``trigger_size`` nodes), pooled over clients."""
        hits, clean, ids = [], [], []
        cache = self.__dict__.setdefault("_triggered", {})
        for c in algo.ctx.clients:
            view = algo.view_for(c)
            if c.cid not in cache or cache[c.cid][0] is not view:
                cache[c.cid] = (view, *triggered_test_graphs(view, self.trigger, self.params, algo.ctx.seed, c.cid))
            _, tview, gids = cache[c.cid]
            if gids.numel() == 0:
                continue
            model = self.model_of(algo, c)
            with torch.no_grad():
                hits.append(model(tview)[gids].argmax(-1).cpu() == self.params.target)
                clean.append(model(view)[gids].argmax(-1).cpu() == self.params.target)
            ids.append(c.data.graph_ids[gids.cpu()])
        return self._result(hits, clean, ids) if hits else {"asr": float("nan"), "asr_clean": float("nan"),
                                                           "asr_items": 0.0}


class GraphBackdoorCBA(GraphBackdoor):
    distributed = False


class GraphBackdoorDBA(GraphBackdoor):
    distributed = True


def poison_graphs(d, trigger: torch.Tensor, p: BackdoorParams, gen: torch.Generator) -> int:
    """Put ``trigger`` into ``poison_rate`` of the client's training graphs (those with at least
    ``trigger_size`` nodes, drawn at random) and set their labels to the target; returns how many."""
    G = int(d.graph_y.numel())
    ptr = graph_offsets(d.graph, G)
    sizes = ptr[1:] - ptr[:-1]
    eligible = (d.graph_train_mask & (sizes >= p.trigger_size)).nonzero().view(-1)
    k = min(eligible.numel(), max(1, int(round(p.poison_rate * int(d.graph_train_mask.sum())))))
    if k == 0:
        return 0
    pick = eligible[torch.randperm(eligible.numel(), generator=gen)[:k]].sort().values
    d.edge_index = embed_in_graphs(d.edge_index, ptr, pick.tolist(), trigger, p.trigger_size, gen)
    y = d.graph_y.clone()
    y[pick] = p.target
    d.graph_y = y
    return k


def triggered_test_graphs(view, trigger: torch.Tensor, p: BackdoorParams, seed: int, cid: int):
    """(a copy of ``view`` with the global trigger in each of its test graphs whose label is not the target and
    that has at least ``trigger_size`` nodes, those graphs' local ids). The trigger's positions are drawn once
    per (seed, client): every evaluation scores the same triggered graphs."""
    G = int(view.graph_y.numel())
    ptr = graph_offsets(view.graph.cpu(), G)
    sizes = ptr[1:] - ptr[:-1]
    gids = (view.graph_test_mask.cpu() & (view.graph_y.cpu() != p.target) & (sizes >= p.trigger_size)).nonzero().view(-1)
    gen = attack_generator(seed, salt=1 + cid)
    out = view.clone()
    out.edge_index = embed_in_graphs(view.edge_index.cpu(), ptr, gids.tolist(), trigger, p.trigger_size,
                                     gen).to(view.edge_index.device)
    return out, gids.to(view.graph_y.device)


class NodeBackdoor(Backdoor):
    """A fixed trigger subgraph attached to poisoned training nodes of the malicious clients (labels set to
    the target); tested by attaching it to every client's test nodes whose label is not the target."""
    task = "node"

    def poison_data(self, clients: list, info, seed: int) -> list:
        p = self.params
        chosen = self._choose(clients, info, seed)
        gen = attack_generator(seed)
        self.trigger = er_trigger(p.trigger_size, p.density, gen)
        if not chosen:
            self.trigger_x = torch.zeros(p.trigger_size, clients[0].data.x.size(1))
            return clients
        # the trigger's features: those of random nodes of the first malicious client (the colluding
        # attackers share one trigger, built from their own data)
        own = clients[chosen[0]].data.x[:clients[chosen[0]].num_owned]
        self.trigger_x = own[torch.randint(own.size(0), (p.trigger_size,), generator=gen)].clone()
        for cid in chosen:
            self.poisoned[cid] = poison_nodes(clients[cid], self.trigger, self.trigger_x, p, gen)
        return clients

    def metrics(self, algo, evaluator) -> dict[str, float]:
        hits, clean, ids = [], [], []
        for c in algo.ctx.clients:
            view = algo.view_for(c)
            n = int(view.num_owned) if getattr(view, "num_owned", None) is not None else view.num_nodes
            test = (view.test_mask[:n] & (view.y[:n] != self.params.target)).nonzero().view(-1)
            if test.numel() == 0:
                continue
            from torch_geometric.data import Data

            x, ei = attach_node_trigger(view.x, view.edge_index, view.num_nodes, test, self.trigger.to(test.device),
                                        self.trigger_x.to(view.x.device))
            tview = Data(x=x, edge_index=ei, num_nodes=x.size(0))
            model = self.model_of(algo, c)
            with torch.no_grad():
                hits.append(model(tview)[test].argmax(-1).cpu() == self.params.target)
                clean.append(model(view)[test].argmax(-1).cpu() == self.params.target)
            ids.append(c.nodes[test.cpu()])
        return self._result(hits, clean, ids) if hits else {"asr": float("nan"), "asr_clean": float("nan"),
                                                           "asr_items": 0.0}


def poison_nodes(client, trigger: torch.Tensor, trigger_x: torch.Tensor, p: BackdoorParams,
                 gen: torch.Generator) -> int:
    """Attach a trigger copy to ``poison_rate`` of the client's training nodes whose label is not the target
    (drawn at random) and set their labels to the target. The trigger's nodes join the client's owned nodes
    (after them come its halo nodes, renumbered), unlabelled and in no split; returns how many were poisoned."""
    d, n = client.data, client.num_owned
    train = d.train_mask[:n] & (d.y[:n] != p.target)
    eligible = train.nonzero().view(-1)
    k = min(eligible.numel(), max(1, int(round(p.poison_rate * int(d.train_mask[:n].sum())))))
    if k == 0:
        return 0
    pick = eligible[torch.randperm(eligible.numel(), generator=gen)[:k]].sort().values
    added = k * trigger_x.size(0)

    # internal edges join owned nodes only (ids < n); cross-client edges' halo ends move up past the new nodes
    x_own, d.edge_index = attach_node_trigger(d.x[:n], d.edge_index, n, pick, trigger, trigger_x)
    d.x = torch.cat([x_own, d.x[n:]], 0)
    d.cross_edge_index = torch.where(d.cross_edge_index >= n, d.cross_edge_index + added, d.cross_edge_index)
    y = d.y.clone()
    y[pick] = p.target
    d.y = torch.cat([y[:n], torch.full((added,), -1, dtype=y.dtype), y[n:]])
    for m in ("train_mask", "val_mask", "test_mask"):
        mask = getattr(d, m)
        setattr(d, m, torch.cat([mask[:n], torch.zeros(added, dtype=torch.bool), mask[n:]]))
    d.num_nodes = int(d.x.size(0))
    d.num_owned = n + added
    client.num_owned = n + added
    return k
