"""by_bank partitioner on generated AML data, and the core's client views of it."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from fgx.data.aml_synth import AmlParams, load
from fgx.data.base import DataEnv, DataError
from fgx.partition.base import build_clients, partition_stats
from fgx.partition.by_bank import ByBankParams, assign_banks, by_bank


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("amlbank")
    return load(AmlParams(preset="tiny"), DataEnv(Path(root), 0, logging.getLogger("t")), "aml_synth", True)


@pytest.mark.parametrize("balance", ["edges", "nodes", "random"])
def test_each_bank_belongs_to_one_client_and_every_node_is_owned_once(tiny, balance):
    d = tiny.data
    parts = by_bank(ByBankParams(num_clients=4, balance=balance), d, tiny.info, seed=0)
    assert len(parts) == 4
    allnodes = torch.cat(parts)
    assert allnodes.numel() == d.num_nodes and allnodes.unique().numel() == d.num_nodes
    banks = [set(d.node_bank[p].tolist()) for p in parts]
    for i in range(4):
        for j in range(i + 1, 4):
            assert not banks[i] & banks[j]


def test_greedy_balancing_is_near_even_and_beats_random(tiny):
    d = tiny.data
    ls = {}
    for balance in ("edges", "random"):
        clients = build_clients(d, tiny.info, by_bank(ByBankParams(4, balance), d, tiny.info, 0))
        ls[balance] = partition_stats(d, tiny.info, clients)["ls_ratio"]
    assert ls["edges"] < 1.2 and ls["edges"] <= ls["random"]


def test_greedy_assignment_largest_first():
    load = torch.tensor([10, 1, 7, 3, 3])
    client = assign_banks(load, 2, "edges", 0)
    totals = torch.zeros(2, dtype=torch.long).index_add_(0, client, load)
    # LPT greedy: 10 -> a, 7 -> b, 3 -> b, 3 -> a, 1 -> b
    assert sorted(totals.tolist()) == [11, 13] and client[0] != client[2]


def test_cross_bank_transactions_are_held_by_both_clients_with_attributes(tiny):
    d = tiny.data
    clients = build_clients(d, tiny.info, by_bank(ByBankParams(4), d, tiny.info, 0))
    held = torch.zeros(d.edge_index.size(1), dtype=torch.long)
    for c in clients:
        cd = c.data
        held[cd.global_edge_id] += 1
        held[cd.cross_global_edge_id] += 1
        assert torch.equal(cd.cross_edge_attr, d.edge_attr[cd.cross_global_edge_id])
        assert torch.equal(cd.cross_edge_y, d.edge_y[cd.cross_global_edge_id])
        # halo rows carry no features
        assert float(cd.x[c.num_owned:].abs().sum()) == 0.0
        # local endpoints map back to the global ones
        glob = torch.cat([c.nodes, c.halo])
        assert torch.equal(glob[cd.cross_edge_index], d.edge_index[:, cd.cross_global_edge_id])
    owner = torch.empty(d.num_nodes, dtype=torch.long)
    for c in clients:
        owner[c.nodes] = c.cid
    crossing = owner[d.edge_index[0]] != owner[d.edge_index[1]]
    assert torch.equal(held, 1 + crossing.long())
    assert crossing.any() and not crossing.all()


def test_refuses_more_clients_than_banks_and_data_without_banks(tiny):
    with pytest.raises(DataError, match="banks"):
        by_bank(ByBankParams(num_clients=10_000), tiny.data, tiny.info, 0)
    from torch_geometric.data import Data
    with pytest.raises(DataError, match="node_bank"):
        by_bank(ByBankParams(), Data(x=torch.ones(3, 1), edge_index=torch.zeros(2, 0, dtype=torch.long)),
                tiny.info, 0)


def test_bank_loads_count_transactions_touching_each_bank_once():
    from torch_geometric.data import Data

    from fgx.partition.by_bank import bank_loads

    # banks 5, 7, 9, 11 -> indices 0..3; bank 11 sends only inside itself, bank 9 only receives
    data = Data(edge_index=torch.tensor([[0, 0, 3, 2, 5], [1, 2, 4, 0, 6]]), num_nodes=7)
    data.node_bank = torch.tensor([5, 5, 7, 7, 9, 11, 11])
    banks, load = bank_loads(data, "edges")
    assert banks.tolist() == [5, 7, 9, 11]
    # (0,1) inside 5; (0,2) 5->7; (3,4) 7->9; (2,0) 7->5; (5,6) inside 11
    assert load.tolist() == [3, 3, 1, 1]
    assert bank_loads(data, "nodes")[1].tolist() == [2, 2, 1, 2]
    # the last bank only receives: its load still has a slot
    data = Data(edge_index=torch.tensor([[0, 0], [1, 2]]), num_nodes=3)
    data.node_bank = torch.tensor([5, 5, 7])
    assert bank_loads(data, "edges")[1].tolist() == [2, 1]


def test_assign_banks_is_largest_first_and_random_is_the_seeded_permutation():
    # largest first: 10 -> client 0, 7 -> client 1, then 1 -> client 1 (index order would give [0, 1, 0])
    assert assign_banks(torch.tensor([1, 10, 7]), 2, "edges", 0).tolist() == [1, 0, 1]
    load = torch.arange(9)
    want = torch.randperm(9, generator=torch.Generator().manual_seed(3)) % 4
    assert torch.equal(assign_banks(load, 4, "random", 3), want)
    assert torch.equal(assign_banks(load, 4, "random", 3), want)
