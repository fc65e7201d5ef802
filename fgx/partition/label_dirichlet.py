"""Label-skewed partition: each class's nodes (graph task: graphs, by graph label) are split across
clients by Dirichlet(alpha) proportions (small alpha: each client sees few classes)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from fgx.config import spec
from fgx.data.base import DataError
from fgx.partition.base import check_num_clients
from fgx.registry import PARTITIONERS


@dataclass
class LabelDirichletParams:
    num_clients: int = field(default=10, metadata=spec(min=1))
    alpha: float = field(default=0.5, metadata=spec(gt=0.0))
    min_nodes: int = field(default=1, metadata=spec(
        min=1, help="redraw until every client has this many nodes (graph task: graphs)"))


@PARTITIONERS.register("label_dirichlet", params=LabelDirichletParams, tasks=("node", "graph"))
def label_dirichlet_partition(p: LabelDirichletParams, data, info, seed: int) -> list[torch.Tensor]:
    if info.task == "graph":     # whole graphs, by graph label
        from fgx.data.graphs import check_num_clients as check_graphs, nodes_of_graphs

        check_graphs(p.num_clients, data)
        return nodes_of_graphs(data, dirichlet_parts(data.graph_y.numpy(), p, seed))
    check_num_clients(p.num_clients, data.num_nodes)
    return dirichlet_parts(data.y.numpy(), p, seed)


def dirichlet_parts(y: np.ndarray, p: LabelDirichletParams, seed: int) -> list[torch.Tensor]:
    """Item ids per client: each label's items split by Dirichlet(alpha) proportions."""
    rng = np.random.default_rng(seed)
    for _ in range(100):
        parts: list[list[int]] = [[] for _ in range(p.num_clients)]
        for k in np.unique(y):
            idx = rng.permutation(np.flatnonzero(y == k))
            props = rng.dirichlet(np.full(p.num_clients, p.alpha))
            cuts = (np.cumsum(props)[:-1] * len(idx)).astype(int)
            for c, chunk in enumerate(np.split(idx, cuts)):
                parts[c].extend(chunk.tolist())
        if min(len(x) for x in parts) >= p.min_nodes:
            return [torch.tensor(sorted(x), dtype=torch.long) for x in parts]
    raise DataError(f"label_dirichlet: no draw in 100 gave every client >= {p.min_nodes} items "
                    f"(alpha={p.alpha}, num_clients={p.num_clients}); raise alpha or lower num_clients")
