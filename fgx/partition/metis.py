"""Disjoint METIS partition (pymetis) into balanced parts with few cut edges."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pymetis
import torch

from fgx.config import spec
from fgx.partition.base import check_num_clients
from fgx.registry import PARTITIONERS


@dataclass
class MetisParams:
    num_clients: int = field(default=10, metadata=spec(min=1))


def metis_parts(edge_index: torch.Tensor, num_nodes: int, num_parts: int, seed: int) -> np.ndarray:
    from torch_geometric.utils import to_undirected

    if num_parts == 1:
        return np.zeros(num_nodes, dtype=np.int64)
    ei = to_undirected(edge_index, num_nodes=num_nodes)
    ei = ei[:, ei[0] != ei[1]]
    order = torch.argsort(ei[0] * num_nodes + ei[1])
    src, dst = ei[0, order].numpy(), ei[1, order].numpy()
    xadj = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=num_nodes))])
    opts = pymetis.Options(seed=seed)
    _, membership = pymetis.part_graph(num_parts, xadj=xadj, adjncy=dst, options=opts)
    return np.asarray(membership)


@PARTITIONERS.register("metis", params=MetisParams, tasks=("node", "edge", "link"))
def metis_partition(p: MetisParams, data, info, seed: int) -> list[torch.Tensor]:
    check_num_clients(p.num_clients, data.num_nodes)
    membership = torch.from_numpy(metis_parts(data.edge_index, data.num_nodes, p.num_clients, seed))
    return [(membership == k).nonzero().view(-1) for k in range(p.num_clients)]
