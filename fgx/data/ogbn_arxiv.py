"""ogbn-arxiv through OGB's PygNodePropPredDataset (optional extra ``ogb``; downloads into the data
root). FedGSP setting: undirected, largest connected component, random 5/47.5/47.5 split."""
from __future__ import annotations

from dataclasses import dataclass, field

from fgx.config import ConfigError, spec
from fgx.data.base import DataEnv, DatasetInfo, GraphDataset, load_ecosystem, random_split
from fgx.registry import DATASETS


@dataclass
class OgbnArxivParams:
    split: str = field(default="random", metadata=spec(choices=["random", "official"]))
    train: float = field(default=0.05, metadata=spec(gt=0.0, max=1.0))
    val: float = field(default=0.475, metadata=spec(min=0.0, max=1.0))
    lcc: bool = True
    split_seed: int | None = None


@DATASETS.register("ogbn_arxiv", params=OgbnArxivParams, task="node")
def load_ogbn_arxiv(p: OgbnArxivParams, env: DataEnv) -> GraphDataset:
    try:
        from ogb.nodeproppred import PygNodePropPredDataset
    except ImportError:
        raise ConfigError("dataset", "ogbn_arxiv", "a dataset whose package is installed: pip install 'fgx[ogb]'") from None
    import torch
    import torch_geometric.transforms as T

    ds = load_ecosystem("ogbn-arxiv", env.data_dir / "ogbn_arxiv",
                        lambda: PygNodePropPredDataset("ogbn-arxiv", root=str(env.data_dir)))
    data = ds[0]
    data.y = data.y.view(-1)
    if p.split == "official":
        idx = ds.get_idx_split()
        for name, key in (("train_mask", "train"), ("val_mask", "valid"), ("test_mask", "test")):
            m = torch.zeros(data.num_nodes, dtype=torch.bool)
            m[idx[key]] = True
            setattr(data, name, m)
    data = T.ToUndirected()(data)
    if p.lcc:
        data = T.LargestConnectedComponents()(data)
    if p.split == "random":
        seed = env.seed if p.split_seed is None else p.split_seed
        data.train_mask, data.val_mask, data.test_mask = random_split(data.num_nodes, p.train, p.val, seed)
    info = DatasetInfo(name="ogbn_arxiv", task="node", num_classes=40, main_metric="accuracy", source="real",
                       extra={"root": str(env.data_dir), "split": p.split})
    return GraphDataset(data, info)
