"""Node-level backdoor (``threat=node_backdoor``, node classification; docs/threats.md, "Graph backdoors").

Malicious clients attach a fixed trigger subgraph (an Erdős–Rényi structure on ``trigger_size`` new nodes,
features copied from random nodes of the attacker's own data) by one edge to a share ``poison_rate`` of their
training nodes and set those nodes' labels to the target class. This is the subgraph-trigger attack that
UGBA (Dai et al. 2023) compares with (SBA-Samp, after Zhang et al. 2021) in its node-classification form;
UGBA's own adaptive trigger generator (a bi-level optimisation against a surrogate GCN, with an
unnoticeability loss) and Xu et al.'s explainability-based feature trigger are not built (docs/threats.md
says why). The attack success rate attaches a copy of the trigger to every client's test nodes whose label
is not the target, all at once, and counts those the model scores as the target."""
from __future__ import annotations

import torch

from fgx.registry import THREATS
from fgx.threats.backdoor import Backdoor, BackdoorParams, attack_generator
from fgx.threats.triggers import er_trigger


def attach_node_trigger(x: torch.Tensor, edge_index: torch.Tensor, num_nodes: int, targets: torch.Tensor,
                        trigger: torch.Tensor, trigger_x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, edge_index) of a graph of ``num_nodes`` nodes with one copy of the trigger subgraph (its pairs
    ``trigger`` over positions 0..k-1, its features ``trigger_x [k, F]``) per node of ``targets``, appended
    after the graph's nodes, each copy's position 0 joined to its target by an undirected edge."""
    k, t = trigger_x.size(0), targets.numel()
    base = num_nodes + k * torch.arange(t)                           # first new node of each copy
    inner = (base.view(1, t, 1) + trigger.view(2, 1, -1)).reshape(2, -1)
    link = torch.stack([targets.long(), base])
    new = torch.cat([inner, link], 1)
    x_out = torch.cat([x, trigger_x.to(x.dtype).repeat(t, 1)], 0)
    return x_out, torch.cat([edge_index, new, new.flip(0)], 1)


@THREATS.register("node_backdoor", params=BackdoorParams)
class NodeBackdoor(Backdoor):
    """A fixed trigger subgraph attached to poisoned training nodes of the malicious clients (labels set to
    the target); tested by attaching it to every client's test nodes whose label is not the target."""
    name = "node_backdoor"
    task = "node"

    def poison_data(self, clients: list, info, seed: int) -> list:
        p = self.params
        chosen = self._chosen(info)
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
