"""Graph backdoors (fgx/threats/backdoor.py, fgx/threats/triggers.py): the trigger is put into malicious
clients' training items with their labels set to the target, a distributed backdoor deals the global trigger
out as disjoint local triggers, and the attack success rate counts only triggered items whose true label is
not the target. Collections of edgeless graphs make every trigger edge visible in the poisoned data."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from fgx.data.base import DatasetInfo
from fgx.threats.backdoor import BackdoorParams
from fgx.threats.graph_backdoor_cba import GraphBackdoorCBA
from fgx.threats.graph_backdoor_dba import GraphBackdoorDBA
from fgx.threats.node_backdoor import NodeBackdoor, attach_node_trigger
from fgx.threats.base import choose_malicious
from fgx.threats.triggers import embed_in_graphs, er_trigger, graph_offsets, split_trigger

INFO = DatasetInfo(name="edgeless", task="graph", num_classes=2, main_metric="accuracy", source="generated")


def edgeless_clients(num_graphs: int = 200, nodes: int = 8, num_clients: int = 10, seed: int = 0):
    """Clients of a collection of edgeless graphs (labels alternate 0/1), graphs at random over clients."""
    from torch_geometric.data import Data

    from fgx.data.graphs import collection, nodes_of_graphs
    from fgx.partition.base import build_clients

    graphs = [Data(x=torch.ones(nodes, 3), edge_index=torch.zeros(2, 0, dtype=torch.long), num_nodes=nodes)
              for _ in range(num_graphs)]
    data = collection(graphs, torch.arange(num_graphs) % 2, (0.6, 0.1), seed)
    parts = torch.randperm(num_graphs, generator=torch.Generator().manual_seed(seed + 101)).chunk(num_clients)
    return build_clients(data, INFO, nodes_of_graphs(data, [p.tolist() for p in parts]))


def edges_per_graph(d) -> torch.Tensor:
    """Undirected edges in each of a client's graphs."""
    return torch.bincount(d.graph[d.edge_index[0]], minlength=int(d.graph_y.numel())) // 2


PARAMS = dict(fraction=0.3, target=1, trigger_size=5, density=0.9, poison_rate=0.5)


def test_er_trigger_and_its_split_into_disjoint_local_triggers_whose_union_is_the_global_one():
    g = torch.Generator().manual_seed(3)
    t = er_trigger(6, 0.7, g)
    assert t.size(1) >= 1 and bool((t[0] < t[1]).all()) and int(t.max()) < 6
    parts = split_trigger(t, 3, g)
    pairs = [set(map(tuple, p.t().tolist())) for p in parts]
    assert all(pairs) and sum(len(p) for p in pairs) == t.size(1)
    assert set().union(*pairs) == set(map(tuple, t.t().tolist()))


def test_subgraph_replacement_removes_the_chosen_nodes_edges_and_adds_the_trigger():
    # one complete graph on 6 nodes: after replacement by a 3-node path, the 3 chosen nodes hold exactly the path
    n = 6
    full = torch.combinations(torch.arange(n)).t()
    ei = torch.cat([full, full.flip(0)], 1)
    trig = torch.tensor([[0, 1], [1, 2]])
    out = embed_in_graphs(ei, torch.tensor([0, n]), [0], trig, 3, torch.Generator().manual_seed(0))
    assert out.size(1) == ei.size(1) - 2 * 3 + 2 * 2      # the triangle among the chosen nodes became a path
    deg_loss = torch.bincount(ei[0], minlength=n) - torch.bincount(out[0], minlength=n)
    assert sorted(deg_loss.tolist()) == [0, 0, 0, 0, 1, 1]  # the path's two ends lose the edge between them


@pytest.mark.parametrize("cls", [GraphBackdoorCBA, GraphBackdoorDBA])
def test_malicious_clients_training_graphs_carry_their_trigger_and_the_target_label(cls):
    clients = edgeless_clients()
    before = [c.data.graph_y.clone() for c in clients]
    threat = cls(BackdoorParams(**PARAMS))
    threat.choose(len(clients), 0)
    threat.poison_data(clients, INFO, seed=0)
    assert threat.malicious == set(choose_malicious(10, 0.3, 0)) and len(threat.malicious) == 3
    for c, y0 in zip(clients, before):
        d = c.data
        touched = edges_per_graph(d) > 0
        if c.cid not in threat.malicious:
            assert not touched.any() and torch.equal(d.graph_y, y0)
            continue
        n_train = int(d.graph_train_mask.sum())
        assert n_train > 0
        assert int(touched.sum()) == threat.poisoned[c.cid] == max(1, round(0.5 * n_train))
        assert bool(d.graph_train_mask[touched].all())              # training graphs only
        assert bool((d.graph_y[touched] == 1).all())                # their labels set to the target
        assert torch.equal(d.graph_y[~touched], y0[~touched])       # the others keep theirs
        # each poisoned graph holds exactly the client's trigger (edgeless before)
        assert bool((edges_per_graph(d)[touched] == threat.local_triggers[c.cid].size(1)).all())


def test_the_distributed_backdoor_gives_each_malicious_client_only_its_local_trigger():
    clients = edgeless_clients()
    threat = GraphBackdoorDBA(BackdoorParams(**PARAMS))
    threat.choose(len(clients), 0)
    threat.poison_data(clients, INFO, seed=0)
    counts = {}
    for cid in threat.malicious:
        d = clients[cid].data
        e = edges_per_graph(d)
        counts[cid] = set(e[e > 0].tolist())
    g = threat.trigger.size(1)
    assert sum(next(iter(c)) for c in counts.values()) == g          # the local triggers add up to the global one
    assert all(max(c) < g for c in counts.values())                  # no malicious client embeds it whole
    cba = GraphBackdoorCBA(BackdoorParams(**PARAMS))
    clients = edgeless_clients()
    cba.choose(len(clients), 0)
    cba.poison_data(clients, INFO, seed=0)
    assert torch.equal(cba.trigger, threat.trigger)                  # same seed: the same global trigger
    assert all(set(edges_per_graph(clients[c].data).unique().tolist()) == {0, g} for c in cba.malicious)


class EdgeModel(torch.nn.Module):
    """Predicts class 1 for a graph with at least one edge, class 0 otherwise."""

    def forward(self, view):
        e = torch.bincount(view.graph[view.edge_index[0]], minlength=int(view.graph_y.numel())).float()
        return torch.stack([(e == 0).float(), (e > 0).float()], 1)


class Always(torch.nn.Module):
    def __init__(self, k):
        super().__init__()
        self.k = k

    def forward(self, view):
        out = torch.zeros(int(view.graph_y.numel()), 2)
        out[:, self.k] = 1
        return out


def fake_algo(clients, model):
    from fgx.tasks import local_view

    views = {c.cid: local_view(c, "graph", False) for c in clients}
    ctx = SimpleNamespace(clients=clients, seed=0, config=SimpleNamespace(top=SimpleNamespace(eval_model="global")))
    return SimpleNamespace(ctx=ctx, view_for=lambda c: views[c.cid], model_for=lambda c: model)


def test_attack_success_rate_counts_triggered_test_graphs_not_already_of_the_target_class():
    clients = edgeless_clients()
    threat = GraphBackdoorCBA(BackdoorParams(**PARAMS))
    threat.choose(len(clients), 0)
    threat.poison_data(clients, INFO, seed=0)
    eligible = sum(int((c.data.graph_test_mask & (c.data.graph_y != 1)).sum()) for c in clients)
    m = threat.metrics(fake_algo(clients, EdgeModel()), None)
    # the global trigger reaches the model (edgeless test graphs gain edges), and only on the eligible items
    assert m == {"asr": 1.0, "asr_clean": 0.0, "asr_items": float(eligible)}
    assert threat.metrics(fake_algo(clients, Always(0)), None)["asr"] == 0.0
    assert threat.metrics(fake_algo(clients, Always(1)), None) == {"asr": 1.0, "asr_clean": 1.0,
                                                                    "asr_items": float(eligible)}
    reps = threat.replicates()
    assert reps is not None and isinstance(reps["split"], str) and reps["asr"]["m"] == pytest.approx(1.0)


def test_node_trigger_copies_hang_off_each_target_node():
    x, ei = torch.eye(4), torch.tensor([[0, 1], [1, 0]])
    trig, tx = torch.tensor([[0, 0], [1, 2]]), torch.full((3, 4), 7.0)
    x2, ei2 = attach_node_trigger(x, ei, 4, torch.tensor([1, 3]), trig, tx)
    assert x2.shape == (10, 4) and bool((x2[4:] == 7).all())
    pairs = set(map(tuple, ei2.t().tolist()))
    assert {(1, 4), (4, 1), (3, 7), (7, 3), (4, 5), (4, 6), (7, 8), (7, 9)} <= pairs and len(pairs) == 2 + 2 * 6


def test_node_backdoor_poisons_training_nodes_of_malicious_clients_only():
    from fgx.data.csbm import CsbmParams, load_csbm
    from fgx.data.base import DataEnv
    from fgx.partition.base import build_clients
    import logging
    from pathlib import Path

    ds = load_csbm(CsbmParams(num_nodes=400, num_features=8), DataEnv(Path("."), 0, logging.getLogger("t")))
    parts = torch.randperm(400, generator=torch.Generator().manual_seed(101)).chunk(5)
    clients = build_clients(ds.data, ds.info, list(parts))
    before = [(c.num_owned, c.data.y.clone(), c.data.cross_edge_index.clone()) for c in clients]
    threat = NodeBackdoor(BackdoorParams(fraction=0.4, target=0, trigger_size=3, density=1.0, poison_rate=0.3))
    threat.choose(len(clients), 0)
    threat.poison_data(clients, ds.info, seed=0)
    assert len(threat.malicious) == 2
    for c, (n0, y0, cross0) in zip(clients, before):
        if c.cid not in threat.malicious:
            assert c.num_owned == n0 and torch.equal(c.data.y, y0)
            continue
        k = threat.poisoned[c.cid]
        assert k == max(1, round(0.3 * int(c.data.train_mask[:n0].sum())))
        assert c.num_owned == n0 + 3 * k and c.data.x.size(0) == c.data.y.numel() == c.data.num_nodes
        flipped = (c.data.y[:n0] != y0[:n0]).nonzero().view(-1)
        assert flipped.numel() == k and bool((c.data.y[flipped] == 0).all()) and bool(c.data.train_mask[flipped].all())
        # each poisoned node is joined to a trigger copy; the trigger nodes are in no split
        ei = c.data.edge_index
        linked = set(ei[0][(ei[1] >= n0) & (ei[0] < n0)].tolist())
        assert linked == set(flipped.tolist())
        assert not c.data.train_mask[n0:c.num_owned].any() and not c.data.test_mask[n0:c.num_owned].any()
        assert torch.equal(c.data.cross_edge_index - 3 * k * (cross0 >= n0).long(), cross0)   # halo ends moved up


class NearTrigger(torch.nn.Module):
    """Predicts class 0 for a node with a neighbour numbered at or past ``n`` (a trigger node hung off it), else 1."""

    def __init__(self, n):
        super().__init__()
        self.n = n

    def forward(self, view):
        ei = view.edge_index
        hit = torch.zeros(view.num_nodes, dtype=torch.bool)
        hit[ei[1][ei[0] >= self.n]] = True
        return torch.stack([hit.float(), (~hit).float()], 1)


def test_node_attack_success_rate_counts_triggered_test_nodes_not_already_of_the_target_class():
    import logging
    from pathlib import Path

    from fgx.data.base import DataEnv
    from fgx.data.csbm import CsbmParams, load_csbm
    from fgx.partition.base import build_clients
    from fgx.tasks import local_view

    ds = load_csbm(CsbmParams(num_nodes=300, num_features=8, num_classes=2), DataEnv(Path("."), 0, logging.getLogger("t")))
    clients = build_clients(ds.data, ds.info, list(torch.randperm(300, generator=torch.Generator().manual_seed(1)).chunk(3)))
    threat = NodeBackdoor(BackdoorParams(fraction=0.34, target=0, trigger_size=3, density=1.0, poison_rate=0.3))
    threat.choose(len(clients), 0)
    threat.poison_data(clients, ds.info, seed=0)
    views = {c.cid: local_view(c, "node", False) for c in clients}
    ctx = SimpleNamespace(clients=clients, seed=0, config=SimpleNamespace(top=SimpleNamespace(eval_model="global")))
    algo = SimpleNamespace(ctx=ctx, view_for=lambda c: views[c.cid],
                           model_for=lambda c: NearTrigger(views[c.cid].num_nodes))
    eligible = sum(int((views[c.cid].test_mask & (views[c.cid].y != 0)).sum()) for c in clients)
    assert 0 < eligible < sum(int(views[c.cid].test_mask.sum()) for c in clients)
    # every eligible test node gets its own trigger copy (seen by the model), and only those count
    assert threat.metrics(algo, None) == {"asr": 1.0, "asr_clean": 0.0, "asr_items": float(eligible)}


def test_a_backdoor_run_on_mutag_poisons_the_malicious_clients_and_its_trigger_moves_test_graphs(run_fgx, data_root):
    """Inside a run (the threat_graph preset, CBA, fewer rounds): 3 of 10 clients malicious, half of each one's
    training graphs poisoned, and the learned backdoor moves far more triggered test graphs to the target class
    than the same graphs without the trigger."""
    import json

    rd = run_fgx("+experiment=threat_graph", "threat=graph_backdoor_cba", "seed=0", "rounds=30", f"data_dir={data_root}")
    s = json.loads((rd / "summary.json").read_text())
    part = json.loads((rd / "partition.json").read_text())
    t = s["threat"]
    assert s["status"] == "completed" and len(t["malicious"]) == 3
    assert t["poisoned"] == {str(c): round(0.5 * part["clients"][c]["train"]) for c in t["malicious"]}
    assert t["asr_items"] > 0 and t["asr"] >= t["asr_clean"] + 0.25
    assert "asr" in t["sampling"] and isinstance(t["sampling"]["split"], str)


def test_a_node_backdoor_run_learns_its_trigger(run_fgx):
    """Inside a run (FedAvg, GCN, a generated graph of 5 clients, 2 malicious): half of each malicious client's
    training nodes poisoned, and the trigger moves far more test nodes to the target class than without it."""
    import json

    rd = run_fgx("algorithm=fedavg", "dataset=csbm", "dataset.num_nodes=600", "dataset.num_features=16",
                 "partitioner=random", "partitioner.num_clients=5", "rounds=30", "model.hidden=16",
                 "threat=node_backdoor", "threat.fraction=0.4", "threat.poison_rate=0.5", "threat.trigger_size=4",
                 "threat.density=1.0")
    s = json.loads((rd / "summary.json").read_text())
    t = s["threat"]
    assert s["status"] == "completed" and len(t["malicious"]) == 2 and all(v > 0 for v in t["poisoned"].values())
    assert t["asr_items"] > 0 and t["asr"] >= t["asr_clean"] + 0.2


@pytest.mark.parametrize("args, match", [
    (["dataset=graph_synth", "algorithm=fedstar", "threat=graph_backdoor_cba"], r"algorithm='fedstar'.*structural encodings"),
    (["dataset=csbm", "algorithm=fedavg", "threat=graph_backdoor_dba"], r"threat.name='graph_backdoor_dba'.*'node' task"),
    (["dataset=graph_synth", "algorithm=fedavg", "threat=node_backdoor"], r"threat.name='node_backdoor'.*'graph' task"),
])
def test_a_backdoor_is_refused_where_its_trigger_would_not_reach_the_model(args, match, tmp_path, monkeypatch):
    from fgx.cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match=match):
        main(["run", *args])
