"""LPSFed's default partition (App. D.2): spectral clustering of the user-item graph. The training
interactions' normalised bipartite Laplacian gives a joint spectral embedding of users and items;
k-means on the users' rows (row-normalised, as in Ng-Jordan-Weiss) assigns users to clients, and a
client owns its users plus their items. Clusters come out unequal in size and density, which is the
structural imbalance the paper studies."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from fgx.config import spec
from fgx.partition.random_users import check_bipartite, clients_from_user_labels
from fgx.recsys.spectral import bipartite_laplacian, lowest_eigenpairs
from fgx.registry import PARTITIONERS


@dataclass
class SpectralBipartiteParams:
    num_clients: int = field(default=4, metadata=spec(min=1))
    embedding_dim: int | None = field(default=None, metadata=spec(
        min=1, help="eigenvectors used for the embedding; null: num_clients"))


@PARTITIONERS.register("spectral_bipartite", params=SpectralBipartiteParams, tasks=("ranking",))
def spectral_bipartite(p: SpectralBipartiteParams, data, info, seed: int) -> list[torch.Tensor]:
    from sklearn.cluster import KMeans

    check_bipartite(data, "spectral_bipartite")
    nu, ni = data.num_users, data.num_items
    ei = data.edge_index[:, data.edge_train_mask].numpy()
    lap = bipartite_laplacian(ei[0], ei[1] - nu, nu, ni)
    _, vec = lowest_eigenpairs(lap, p.embedding_dim or p.num_clients, seed=seed)
    emb = vec[:nu]
    emb = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
    labels = KMeans(p.num_clients, n_init=10, random_state=seed).fit_predict(emb)
    return clients_from_user_labels(data, torch.from_numpy(labels).long(), p.num_clients)
