"""LPSFed Table 7 "Interconnected-Const." partition: equal-size user groups that are connected in
the interaction graph. Users are ordered by a breadth-first search over the user-item graph from
a random seed user (networkx), the order is cut into ``num_clients`` equal chunks, and each client
owns its chunk's users plus their items."""
from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx
import numpy as np
import torch

from fgx.config import spec
from fgx.partition.random_users import check_bipartite, clients_from_user_labels
from fgx.registry import PARTITIONERS


@dataclass
class InterconnectedParams:
    num_clients: int = field(default=4, metadata=spec(min=1))


@PARTITIONERS.register("interconnected", params=InterconnectedParams, tasks=("ranking",))
def interconnected(p: InterconnectedParams, data, info, seed: int) -> list[torch.Tensor]:
    check_bipartite(data, "interconnected")
    nu = data.num_users
    g = nx.Graph()
    g.add_nodes_from(range(data.num_nodes))
    g.add_edges_from(data.edge_index[:, data.edge_train_mask].t().tolist())
    rng = np.random.default_rng(seed)
    order, seen = [], set()
    for start in [int(rng.integers(nu))] + rng.permutation(nu).tolist():   # later starts cover other components
        if start in seen:
            continue
        comp = [n for n in nx.bfs_tree(g, start) if n not in seen]
        seen.update(comp)
        order.extend(n for n in comp if n < nu)
    labels = torch.empty(nu, dtype=torch.long)
    for c, chunk in enumerate(np.array_split(np.array(order), p.num_clients)):
        labels[torch.from_numpy(chunk).long()] = c
    return clients_from_user_labels(data, labels, p.num_clients)
