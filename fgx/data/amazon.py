"""Amazon co-purchase graphs (Computers, Photo) through PyG's Amazon loader (downloads when the
raw file is missing under <data_dir>/<Name>/raw). No fixed split: a random one (20/40/40 default)."""
from __future__ import annotations

from dataclasses import dataclass, field

from fgx.config import spec
from fgx.data.base import DataEnv, DatasetInfo, GraphDataset, random_split
from fgx.data.prepare import prepared_ecosystem
from fgx.registry import DATASETS


@dataclass
class AmazonParams:
    dataset: str = field(default="Computers", metadata=spec(choices=["Computers", "Photo"]))
    train: float = field(default=0.2, metadata=spec(gt=0.0, max=1.0))
    val: float = field(default=0.4, metadata=spec(min=0.0, max=1.0))
    lcc: bool = True
    normalize_features: bool = True
    split_seed: int | None = None   # null: the run's seed


@DATASETS.register("amazon", params=AmazonParams, task="node", folder=lambda p: p.dataset.capitalize())
def load_amazon(p: AmazonParams, env: DataEnv) -> GraphDataset:
    from torch_geometric.datasets import Amazon
    import torch_geometric.transforms as T

    steps = ([T.LargestConnectedComponents()] if p.lcc else []) + ([T.NormalizeFeatures()] if p.normalize_features else [])
    ds = prepared_ecosystem(p.dataset, env.data_dir, p.dataset.capitalize(), lambda r: Amazon(
        str(r), p.dataset, transform=T.Compose(steps) if steps else None))
    data = ds[0]
    seed = env.seed if p.split_seed is None else p.split_seed
    data.train_mask, data.val_mask, data.test_mask = random_split(data.num_nodes, p.train, p.val, seed)
    info = DatasetInfo(name=f"amazon_{p.dataset.lower()}", task="node", num_classes=int(data.y.max()) + 1,
                       main_metric="accuracy", source="real", extra={"root": str(env.data_dir)})
    return GraphDataset(data, info)
