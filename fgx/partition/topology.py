"""Decentralised learning: the clients are the nodes of a communication graph (fgx.decentral.topology)
and the dataset's rows (tabular items) are spread uniformly at random over them, the training rows
and the other rows each in equal shares (±1), as the authors' round-robin split of a shuffled
training set: every node then has the same number of batches. The gossip algorithms rebuild the
same graph from these params (``partitioner.graph`` ...)."""
from __future__ import annotations

import torch

from fgx.decentral.topology import TopologyParams, build_graph
from fgx.partition.base import check_num_clients
from fgx.registry import PARTITIONERS


@PARTITIONERS.register("topology", params=TopologyParams, tasks=("regression",))
def topology_partition(p: TopologyParams, data, info, seed: int) -> list[torch.Tensor]:
    n = build_graph(p).number_of_nodes()
    check_num_clients(n, data.num_nodes)
    g = torch.Generator().manual_seed(seed * 7919 + 104729)
    train = getattr(data, "train_mask", None)
    if train is None:
        return list(torch.tensor_split(torch.randperm(data.num_nodes, generator=g), n))
    parts = []
    for rows in (train.nonzero().view(-1), (~train).nonzero().view(-1)):
        parts.append(torch.tensor_split(rows[torch.randperm(len(rows), generator=g)], n))
    return [torch.cat([a, b]).sort().values for a, b in zip(*parts)]
