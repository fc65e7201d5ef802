"""Heterophilous benchmarks of Platonov et al. (ICLR 2023) through PyG's HeterophilousGraphDataset:
roman-empire, amazon-ratings, minesweeper, tolokers, questions. With ``<data_dir>/<name>/raw/<name>.npz``
present it works offline; otherwise PyG downloads. Binary sets report ROC-AUC."""
from __future__ import annotations

from dataclasses import dataclass, field

from fgx.config import spec
from fgx.data.base import DataEnv, DatasetInfo, GraphDataset, load_ecosystem, random_split, staged_root
from fgx.registry import DATASETS

NAMES = ["Roman-empire", "Amazon-ratings", "Minesweeper", "Tolokers", "Questions"]
BINARY = {"Minesweeper", "Tolokers", "Questions"}


@dataclass
class HeterophilousParams:
    dataset: str = field(default="Minesweeper", metadata=spec(choices=NAMES))
    split: str = field(default="random", metadata=spec(
        choices=["random", "fixed"], help="random: fractions below (FedGSP 20/40/40); fixed: the dataset's masks"))
    fixed_split_index: int = field(default=0, metadata=spec(min=0, max=9))
    train: float = field(default=0.2, metadata=spec(gt=0.0, max=1.0))
    val: float = field(default=0.4, metadata=spec(min=0.0, max=1.0))
    split_seed: int | None = field(default=None, metadata=spec(help="null: the run's seed (FED-PUB used 1234)"))


@DATASETS.register("heterophilous", params=HeterophilousParams, task="node")
def load_heterophilous(p: HeterophilousParams, env: DataEnv) -> GraphDataset:
    from torch_geometric.datasets import HeterophilousGraphDataset

    folder = p.dataset.lower().replace("-", "_")
    raw = [f"{folder}.npz"]
    have_raw = (env.data_dir / folder / "raw" / raw[0]).exists()
    root = staged_root(env.data_dir, folder, raw) if have_raw else env.data_dir
    if not have_raw:
        env.log.info("%s not found under %s: PyG will download it", p.dataset, env.data_dir)
    ds = load_ecosystem(p.dataset, root / folder, lambda: HeterophilousGraphDataset(str(root), p.dataset))
    data = ds[0]
    if p.split == "random":
        seed = env.seed if p.split_seed is None else p.split_seed
        data.train_mask, data.val_mask, data.test_mask = random_split(data.num_nodes, p.train, p.val, seed)
    else:
        i = p.fixed_split_index
        data.train_mask, data.val_mask, data.test_mask = (data.train_mask[:, i], data.val_mask[:, i],
                                                          data.test_mask[:, i])
    info = DatasetInfo(name=folder, task="node", num_classes=int(ds.num_classes), source="real",
                       main_metric="roc_auc" if p.dataset in BINARY else "accuracy",
                       extra={"root": str(root), "split": p.split})
    return GraphDataset(data, info)
