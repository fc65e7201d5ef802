"""ogbn-products through OGB's PygNodePropPredDataset (optional extra ``ogb``; downloads about 1.4 GB
into the data root when it is not there). Official sales-rank split (196,615 / 39,323 / 2,213,091),
as in ScaleGUN's Table 1. The graph is already undirected. Offline stand-in of the same size: a
generated contextual SBM (``dataset=csbm`` with the sizes of conf/experiment/scalegun_table1_products.yaml)."""
from __future__ import annotations

from dataclasses import dataclass, field

from fgx.config import ConfigError, spec
from fgx.data.base import DataEnv, DatasetInfo, GraphDataset, load_ecosystem, random_split
from fgx.registry import DATASETS


@dataclass
class OgbnProductsParams:
    split: str = field(default="official", metadata=spec(choices=["official", "random"]))
    train: float = field(default=0.08, metadata=spec(gt=0.0, max=1.0, help="random split only"))
    val: float = field(default=0.016, metadata=spec(min=0.0, max=1.0, help="random split only"))
    split_seed: int | None = None


@DATASETS.register("ogbn_products", params=OgbnProductsParams, task="node", folder=lambda p: "ogbn_products")
def load_ogbn_products(p: OgbnProductsParams, env: DataEnv) -> GraphDataset:
    try:
        from ogb.nodeproppred import PygNodePropPredDataset
    except ImportError:
        raise ConfigError("dataset", "ogbn_products", "a dataset whose package is installed: pip install 'fgx[ogb]'") from None
    import torch

    ds = load_ecosystem("ogbn-products", env.data_dir / "ogbn_products",
                        lambda: PygNodePropPredDataset("ogbn-products", root=str(env.data_dir)))
    data = ds[0]
    data.y = data.y.view(-1)
    if p.split == "official":
        idx = ds.get_idx_split()
        for name, key in (("train_mask", "train"), ("val_mask", "valid"), ("test_mask", "test")):
            m = torch.zeros(data.num_nodes, dtype=torch.bool)
            m[idx[key]] = True
            setattr(data, name, m)
    else:
        seed = env.seed if p.split_seed is None else p.split_seed
        data.train_mask, data.val_mask, data.test_mask = random_split(data.num_nodes, p.train, p.val, seed)
    info = DatasetInfo(name="ogbn_products", task="node", num_classes=47, main_metric="accuracy", source="real",
                       extra={"root": str(env.data_dir), "split": p.split})
    return GraphDataset(data, info)
