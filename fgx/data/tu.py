"""TU graph-classification datasets (Morris et al. 2020: MUTAG, PROTEINS, ENZYMES, ...) through PyG's
``TUDataset``, for the ``graph`` task (fgx/data/graphs.py).

Any TU name works: with ``<data_dir>/<NAME>/raw/<NAME>_*.txt`` present it loads offline; otherwise PyG
downloads the files into the data root (a machine without internet gets a DataError that says what
to place where). Node features are the TU node labels (one-hot; ``use_node_attr`` adds the continuous
attributes); a dataset with neither gets one-hot node degrees (GCFL's ``convert_x``)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fgx.config import spec
from fgx.data.base import DataEnv, DataError, DatasetInfo, GraphDataset
from fgx.data.prepare import staged_root
from fgx.data.graphs import check_collection, collection
from fgx.registry import DATASETS

REQUIRED = ("A", "graph_indicator", "graph_labels")


@dataclass
class TUParams:
    tu_name: str = field(default="MUTAG", metadata=spec(help="the TU collection's name, e.g. MUTAG, PROTEINS, ENZYMES"))
    use_node_attr: bool = field(default=False, metadata=spec(
        help="add the continuous node attributes to the one-hot node labels (GCFL/FedStar: false)"))
    train: float = field(default=0.8, metadata=spec(gt=0.0, max=1.0, help="share of graphs for training (GCFL: 0.8)"))
    val: float = field(default=0.1, metadata=spec(min=0.0, max=1.0, help="share of graphs for validation (GCFL: 0.1)"))
    split_seed: int | None = field(default=None, metadata=spec(help="seed of the split by graph; null: the run's seed"))

    def validate(self, prefix: str) -> None:
        from fgx.config import ConfigError

        if not self.tu_name or any(c in self.tu_name for c in "/\\") or self.tu_name.startswith("."):
            raise ConfigError(f"{prefix}.tu_name", self.tu_name, "a TU dataset name such as MUTAG (no path)")
        if self.train + self.val >= 1:
            raise ConfigError(f"{prefix}.val", self.val, f"< {1 - self.train:g} (train + val must leave test graphs)")


def tu_graphs(name: str, env: DataEnv, use_node_attr: bool) -> tuple[list, torch.Tensor, int, str]:
    """The graphs of TU dataset ``name`` (PyG ``Data`` each), their labels, the number of classes and
    the folder they were read from. Downloads through PyG when the raw files are not in the data root."""
    from torch_geometric.datasets import TUDataset
    from torch_geometric.transforms import OneHotDegree
    from torch_geometric.utils import degree

    from fgx.data.prepare import prepared_ecosystem

    raw = [f"{name}_{r}.txt" for r in REQUIRED]
    have_raw = all((env.data_dir / name / "raw" / r).exists() for r in raw)
    root = staged_root(env.data_dir, name, raw) if have_raw else env.data_dir
    if not have_raw:
        env.log.info("TU dataset %s not found under %s: PyG will download it", name, env.data_dir / name / "raw")
    try:
        ds = prepared_ecosystem(name, root, name, lambda r: TUDataset(str(r), name, use_node_attr=use_node_attr))
    except DataError as e:
        if have_raw:
            raise
        raise DataError(f"TU dataset {name!r}: its files are not in the data root ({env.data_dir / name / 'raw'} "
                        f"needs {', '.join(raw)}) and PyG could not download them ({e.__cause__ or e}). Place the "
                        f"TU files there (data_dir=...), or run once with internet access") from None
    y = ds._data.y
    if y is None or y.is_floating_point():
        raise DataError(f"TU dataset {name!r} has regression targets; fgx's graph task reads class labels")
    graphs = [ds[i] for i in range(len(ds))]
    if ds.num_node_features == 0:
        # no node labels or attributes: one-hot degrees up to the dataset's largest (GCFL's convert_x)
        top = max(int(degree(g.edge_index[0], g.num_nodes).max()) if g.edge_index.numel() else 0 for g in graphs)
        graphs = [OneHotDegree(top)(g) for g in graphs]
    labels = torch.stack([g.y.view(-1)[0] for g in graphs]).long()
    return graphs, labels, int(labels.max()) + 1, str(root / name)


@DATASETS.register("tu", params=TUParams, task="graph")
def load_tu(p: TUParams, env: DataEnv) -> GraphDataset:
    graphs, labels, k, folder = tu_graphs(p.tu_name, env, p.use_node_attr)
    data = collection(graphs, labels, (p.train, p.val), env.seed if p.split_seed is None else p.split_seed)
    check_collection(data, k, p.tu_name)
    info = DatasetInfo(name=p.tu_name.lower(), task="graph", num_classes=k, main_metric="accuracy", source="real",
                       extra={"root": folder, "graphs": len(graphs), "tu_name": p.tu_name})
    return GraphDataset(data, info)
