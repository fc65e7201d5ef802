"""Partitioners do what their name promises: community partitioners cut far fewer edges than a random
split, label_dirichlet skews each client's labels as its α says."""
from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from fgx.data.base import DataEnv
from fgx.data.csbm import CsbmParams, load_csbm
from fgx.registry import PARTITIONERS


@pytest.fixture(scope="module")
def graph():
    """Five well-separated communities (homophily 0.9)."""
    return load_csbm(CsbmParams(num_nodes=600, num_features=4, avg_degree=8, homophily=0.9),
                     DataEnv(None, 0, logging.getLogger()))


def _partition(ds, name: str, seed: int = 0, **params) -> list[torch.Tensor]:
    entry = PARTITIONERS.get(name)
    return entry.obj(entry.params(**params), ds.data, ds.info, seed)


def _cut_fraction(ds, parts) -> float:
    owner = torch.full((ds.data.num_nodes,), -1)
    for c, nodes in enumerate(parts):
        owner[nodes] = c
    ei = ds.data.edge_index
    return float((owner[ei[0]] != owner[ei[1]]).float().mean())


@pytest.mark.parametrize("name", ["louvain", "metis"])
def test_community_partitioners_cut_far_fewer_edges_than_random(graph, name):
    k = 5
    rand = np.mean([_cut_fraction(graph, _partition(graph, "random", seed=s, num_clients=k)) for s in range(3)])
    assert rand == pytest.approx(1 - 1 / k, abs=0.05)
    parts = _partition(graph, name, num_clients=k)
    sizes = [len(p) for p in parts]
    assert min(sizes) > 0.5 * graph.data.num_nodes / k         # balanced, not one giant client
    assert _cut_fraction(graph, parts) < 0.4 * rand, (name, _cut_fraction(graph, parts), rand)


def _top_class_share(ds, parts) -> float:
    y = ds.data.y
    return float(np.mean([torch.bincount(y[p]).max().item() / len(p) for p in parts]))


def test_label_dirichlet_skews_labels_as_alpha_says(graph):
    y = graph.data.y
    overall = torch.bincount(y).max().item() / len(y)
    skewed = np.mean([_top_class_share(graph, _partition(graph, "label_dirichlet", seed=s, num_clients=5, alpha=0.1))
                      for s in range(3)])
    even = np.mean([_top_class_share(graph, _partition(graph, "label_dirichlet", seed=s, num_clients=5, alpha=100.0))
                    for s in range(3)])
    assert skewed > 0.65, skewed                      # α = 0.1: a client sees mostly one class
    assert even < overall + 0.1, (even, overall)      # α = 100: each client mirrors the global mix


@pytest.mark.parametrize("name", ["louvain", "random", "label_dirichlet", "metis_overlapping"])
def test_seeded_partitioners_depend_on_their_seed(name):
    """The run's seed reaches the partitioner: one seed gives one partition, two seeds give two (on a
    graph with weak communities, where Louvain's node order matters)."""
    noisy = load_csbm(CsbmParams(num_nodes=600, num_features=4, avg_degree=8, homophily=0.5),
                      DataEnv(None, 0, logging.getLogger()))
    a, again, b = (_partition(noisy, name, seed=s, num_clients=5) for s in (3, 3, 4))
    assert all(torch.equal(torch.as_tensor(x), torch.as_tensor(y)) for x, y in zip(a, again))
    assert len(a) != len(b) or any(not torch.equal(torch.as_tensor(x), torch.as_tensor(y)) for x, y in zip(a, b))
