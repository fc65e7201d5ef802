"""Backdoor attacks on federated graph learning (docs/threats.md, "Graph backdoors").

Malicious clients (a ``fraction`` of them, drawn by the run's seed) poison their own training data before
training: they put a trigger into some of their training items and set those items' labels to the
attacker's ``target`` class; they then train and send their updates like every other client (the server
sees nothing but updates, as in every run). The attack succeeds when the trained model classifies an
item carrying the trigger as the target class.

- ``graph_backdoor_cba`` / ``graph_backdoor_dba`` (graph classification, fgx/threats/graph_backdoor_cba.py and
  _dba.py; Xu et al. 2022, "More is Better (Mostly): On the Backdoor Attacks in Federated Graph Neural Networks"): an Erdős–Rényi subgraph trigger
  put into a share ``poison_rate`` of a malicious client's training graphs by subgraph replacement
  (fgx/threats/triggers.py). Centralised (CBA): every malicious client embeds the whole global trigger.
  Distributed (DBA): the global trigger's edges are split into one local trigger per malicious client,
  each embedding only its own. Both are tested with the whole global trigger.
- ``node_backdoor`` (node classification, fgx/threats/node_backdoor.py): a trigger subgraph attached to
  poisoned training nodes.

Attack success rate (``asr``): the share of the triggered test items whose true label is not the target
that the model scores as the target class, pooled over every client's test items (the attacker targets the
shared model). ``asr_clean`` is the same share on the same items without the trigger: what the attack
would score with no backdoor at all."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fgx.config import ConfigError, spec
from fgx.data.base import DataError
from fgx.threats.base import Threat, ThreatParams
from fgx.threats.triggers import embed_in_graphs, er_trigger, graph_offsets, split_trigger

# algorithms whose model reads more of a graph than its features and edges as the client's view holds them
# (inputs computed once from each graph's structure at setup), or that score their own way: a trigger put
# into the view would not reach what the model reads, so the attack success rate would be wrong
_OWN_INPUTS = {"fedstar": "its structural encodings are computed from each graph at setup",
               "fedssp_graph": "its spectral inputs (eigenvalues, filters) are computed from each graph at setup"}


def attack_generator(seed: int, salt: int = 0) -> torch.Generator:
    """The attacker's own random stream (trigger, poisoned items), apart from the run's."""
    return torch.Generator().manual_seed(seed * 7919 + 7000 + salt)


@dataclass
class BackdoorParams(ThreatParams):
    target: int = field(default=0, metadata=spec(min=0, help="the class the trigger should make the model predict"))
    trigger_size: int = field(default=4, metadata=spec(min=2, help="nodes of the trigger subgraph"))
    density: float = field(default=0.8, metadata=spec(gt=0.0, max=1.0,
                                                      help="edge probability of the Erdős–Rényi trigger"))
    poison_rate: float = field(default=0.2, metadata=spec(gt=0.0, max=1.0,
                                                          help="share of a malicious client's training items poisoned"))


class Backdoor(Threat):
    """What the graph-level and node-level backdoors share: the checks, the attack success rate from per-item
    hits, bootstrap replicates of it over the triggered items."""
    task = ""
    poisons_data = True

    def __init__(self, params: BackdoorParams):
        super().__init__(params)
        self.poisoned: dict[int, int] = {}      # client id -> items poisoned
        self.last: dict | None = None           # the latest evaluation's hits and item ids

    @classmethod
    def check_config(cls, params: BackdoorParams, validated) -> None:
        from fgx.link.checks import run_task

        super().check_config(params, validated)
        task = run_task(validated.top, validated.entries)
        if task != cls.task:
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

    def _chosen(self, info) -> list[int]:
        """The malicious clients (drawn by the trainer through ``choose``), once the target is known valid."""
        if self.params.target >= info.num_classes:
            raise DataError(f"threat.target={self.params.target}: dataset '{info.name}' has classes "
                            f"0..{info.num_classes - 1}")
        return sorted(self.malicious)

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

    def report(self) -> dict:
        """summary.json's ``threat``: the malicious clients, how many items each poisoned, and the replicates of
        the attack success rate (``sampling``: what a table's ordering test reads, fgx/tables/checks.py)."""
        return {**super().report(), "poisoned": {str(k): v for k, v in sorted(self.poisoned.items())},
                **({"sampling": reps} if (reps := self.replicates()) is not None else {})}


class GraphBackdoor(Backdoor):
    """Xu et al. 2022's federated graph backdoor, centralised (``distributed`` False) or distributed."""
    task = "graph"
    distributed = False

    def poison_data(self, clients: list, info, seed: int) -> list:
        p = self.params
        chosen = self._chosen(info)
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
