"""Several TU datasets as one collection: GCFL's cross-dataset setting (Xie et al. 2021, e.g. its
"molecules" group), where each client holds graphs of one dataset (``partitioner=cross_dataset``).

Each member keeps its own label space: member d's classes are numbered after those of the members
before it, so a label never means two things, and ``graph_source`` says which member a graph is
from. Feature spaces differ between members, so they are laid side by side: member d's node features
occupy their own block of columns and are zero elsewhere (what GCFL's per-dataset input layer sees)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fgx.config import spec
from fgx.data.base import DataEnv, DatasetInfo, GraphDataset
from fgx.data.graphs import check_collection, collection
from fgx.data.tu import tu_graphs
from fgx.registry import DATASETS


@dataclass
class TUGroupParams:
    members: list[str] = field(default_factory=lambda: ["MUTAG", "PROTEINS", "ENZYMES"], metadata=spec(
        help="the TU datasets of the group, each read as dataset=tu reads it"))
    use_node_attr: bool = False
    train: float = field(default=0.8, metadata=spec(gt=0.0, max=1.0))
    val: float = field(default=0.1, metadata=spec(min=0.0, max=1.0))
    split_seed: int | None = None

    def validate(self, prefix: str) -> None:
        from fgx.config import ConfigError

        if len(self.members) < 2 or len(set(self.members)) != len(self.members):
            raise ConfigError(f"{prefix}.members", self.members, "two or more distinct TU names")
        if self.train + self.val >= 1:
            raise ConfigError(f"{prefix}.val", self.val, f"< {1 - self.train:g} (train + val must leave test graphs)")


@DATASETS.register("tu_group", params=TUGroupParams, task="graph")
def load_tu_group(p: TUGroupParams, env: DataEnv) -> GraphDataset:
    parts = [tu_graphs(name, env, p.use_node_attr) for name in p.members]
    widths = [gs[0].x.size(1) for gs, *_ in parts]
    total = sum(widths)
    graphs, labels, source, offset, k_total = [], [], [], 0, 0
    for d, ((gs, y, k, _), w) in enumerate(zip(parts, widths)):
        for g in gs:
            x = torch.zeros(g.num_nodes, total)
            x[:, offset:offset + w] = g.x
            g = g.clone()
            g.x = x
            graphs.append(g)
        labels.append(y + k_total)
        source.append(torch.full((len(gs),), d))
        offset += w
        k_total += k
    data = collection(graphs, torch.cat(labels), (p.train, p.val),
                      env.seed if p.split_seed is None else p.split_seed, torch.cat(source))
    check_collection(data, k_total, "tu_group")
    info = DatasetInfo(name="tu_group", task="graph", num_classes=k_total, main_metric="accuracy", source="real",
                       extra={"members": ",".join(p.members), "graphs": len(graphs),
                              "classes_per_member": ",".join(str(k) for _, _, k, _ in parts)})
    return GraphDataset(data, info)
