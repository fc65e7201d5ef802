"""Planetoid citation graphs (Cora, CiteSeer, PubMed) through PyG's own loader.

With the raw files under ``<data_dir>/<Name>/raw`` it works offline; otherwise PyG downloads them."""
from __future__ import annotations

from dataclasses import dataclass, field

from fgx.config import spec
from fgx.data.base import DataEnv, DatasetInfo, GraphDataset, load_ecosystem, random_split, staged_root
from fgx.registry import DATASETS

RAW = [f"ind.{{}}.{s}" for s in ("x", "y", "tx", "ty", "allx", "ally", "graph", "test.index")]


@dataclass
class PlanetoidParams:
    dataset: str = field(default="Cora", metadata=spec(choices=["Cora", "CiteSeer", "PubMed"]))
    split: str = field(default="random", metadata=spec(
        choices=["random", "public", "full"],
        help="random: train/val/test fractions; public: Planetoid's split; full: Planetoid's val/test, every other node trains"))
    train: float = field(default=0.2, metadata=spec(gt=0.0, max=1.0))
    val: float = field(default=0.4, metadata=spec(min=0.0, max=1.0))
    normalize_features: bool = False
    lcc: bool = field(default=False, metadata=spec(help="keep the largest connected component (FED-PUB/FedGSP)"))
    split_seed: int | None = field(default=None, metadata=spec(help="seed of the random split; null: the run's seed"))
    features_public: bool = field(default=False, metadata=spec(
        help="declare the node features public: lets methods whose messages carry raw or summed features "
             "(FedGCN, ce_fedgnn remote_layer0=raw) run; the channel refuses them otherwise"))


@DATASETS.register("planetoid", params=PlanetoidParams, task="node")
def load_planetoid(p: PlanetoidParams, env: DataEnv) -> GraphDataset:
    from torch_geometric.datasets import Planetoid
    import torch_geometric.transforms as T

    raw_files = [r.format(p.dataset.lower()) for r in RAW]
    have_raw = all((env.data_dir / p.dataset / "raw" / r).exists() for r in raw_files)
    root = staged_root(env.data_dir, p.dataset, raw_files) if have_raw else env.data_dir
    if not have_raw:
        env.log.info("Planetoid %s not found under %s: PyG will download it", p.dataset, env.data_dir)
    steps = ([T.LargestConnectedComponents()] if p.lcc else []) + ([T.NormalizeFeatures()] if p.normalize_features else [])
    transform = T.Compose(steps) if steps else None
    ds = load_ecosystem(p.dataset, root / p.dataset, lambda: Planetoid(
        str(root), p.dataset, split="full" if p.split == "full" else "public", transform=transform))
    data = ds[0]
    if p.split == "random":
        data.train_mask, data.val_mask, data.test_mask = random_split(
            data.num_nodes, p.train, p.val, env.seed if p.split_seed is None else p.split_seed)
    info = DatasetInfo(name=p.dataset.lower(), task="node", num_classes=ds.num_classes, main_metric="accuracy",
                       source="real", extra={"root": str(root), "split": p.split},
                       features_public=p.features_public)
    return GraphDataset(data, info)
