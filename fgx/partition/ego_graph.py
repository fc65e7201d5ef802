"""LPSFed Table 7 "Ego-graph" partition: each client grows around one seed user — the seed's
items' community: the ``users_per_client`` - 1 users sharing the most training items with the
seed (ties by id), plus all their items. Clients may overlap (a user can sit in several egos)."""
from __future__ import annotations

from dataclasses import dataclass, field

import scipy.sparse as sp
import numpy as np
import torch

from fgx.config import spec
from fgx.data.base import DataError
from fgx.partition.random_users import check_bipartite
from fgx.registry import PARTITIONERS


@dataclass
class EgoGraphParams:
    num_clients: int = field(default=4, metadata=spec(min=1))
    users_per_client: int = field(default=200, metadata=spec(min=1))


@PARTITIONERS.register("ego_graph", params=EgoGraphParams, tasks=("ranking",))
def ego_graph(p: EgoGraphParams, data, info, seed: int) -> list[torch.Tensor]:
    check_bipartite(data, "ego_graph")
    nu, ni = data.num_users, data.num_items
    if p.num_clients > nu:
        raise DataError(f"partitioner.num_clients={p.num_clients} is larger than the {nu} users")
    ei = data.edge_index.numpy()
    tr = data.edge_train_mask.numpy()
    r = sp.csr_matrix((np.ones(int(tr.sum())), (ei[0, tr], ei[1, tr] - nu)), shape=(nu, ni))
    rng = np.random.default_rng(seed)
    seeds = rng.choice(nu, size=p.num_clients, replace=False)
    out = []
    for s in seeds:
        shared = np.asarray((r @ r[s].T).todense()).ravel()   # items each user shares with the seed
        shared[s] = np.inf
        users = np.argsort(-shared, kind="stable")[: p.users_per_client]
        users_t = torch.from_numpy(np.sort(users)).long()
        mask = torch.zeros(nu, dtype=torch.bool)
        mask[users_t] = True
        items = torch.unique(data.edge_index[1][mask[data.edge_index[0]]])
        out.append(torch.cat([users_t, items]))
    return out
