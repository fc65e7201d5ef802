"""GCFL's cross-dataset setting (Xie et al. 2021): each client holds graphs of one member dataset of a
group (``dataset=tu_group``; or one label-rule group of ``dataset=graph_synth``), so clients differ in
feature and label space. Each member's graphs are split at random over ``clients_per_dataset``
clients (GCFL: one)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fgx.config import spec
from fgx.data.base import DataError
from fgx.registry import PARTITIONERS


@dataclass
class CrossDatasetParams:
    clients_per_dataset: int = field(default=1, metadata=spec(min=1, help="clients per member dataset (GCFL: 1)"))


@PARTITIONERS.register("cross_dataset", params=CrossDatasetParams, tasks=("graph",))
def cross_dataset_partition(p: CrossDatasetParams, data, info, seed: int) -> list[torch.Tensor]:
    from fgx.data.graphs import nodes_of_graphs

    g = torch.Generator().manual_seed(seed * 7919 + 104729)
    parts = []
    for s in torch.unique(data.graph_source).tolist():
        ids = (data.graph_source == s).nonzero().view(-1)
        if ids.numel() < p.clients_per_dataset:
            raise DataError(f"partitioner.clients_per_dataset={p.clients_per_dataset} is larger than member {s}'s "
                            f"{ids.numel()} graphs")
        parts += list(torch.tensor_split(ids[torch.randperm(ids.numel(), generator=g)], p.clients_per_dataset))
    if len(parts) < 2:
        raise DataError(f"cross_dataset: the dataset '{info.name}' has a single member; use a group "
                        f"(dataset=tu_group, or dataset=graph_synth with groups > 1) or partitioner=random")
    return nodes_of_graphs(data, parts)
