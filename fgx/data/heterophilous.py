"""Heterophilous benchmarks of Platonov et al. (ICLR 2023) through PyG's HeterophilousGraphDataset:
roman-empire, amazon-ratings, minesweeper, tolokers, questions, and the same authors' filtered
chameleon and squirrel (duplicate nodes removed) and actor, files of the same format. With
``<data_dir>/<name>/raw/<name>.npz`` present it works offline; otherwise PyG downloads it from the
authors' repository. Binary sets report ROC-AUC."""
from __future__ import annotations

from dataclasses import dataclass, field

from pathlib import Path

import numpy as np

from fgx.config import spec
from fgx.data.base import DataEnv, DataError, DatasetInfo, GraphDataset, clients_fit, random_split
from fgx.data.prepare import staged_root
from fgx.data.checks import check_arrays
from fgx.data.prepare import prepared_ecosystem
from fgx.registry import DATASETS

PYG_NAMES = ["Roman-empire", "Amazon-ratings", "Minesweeper", "Tolokers", "Questions"]
FILTERED = ["chameleon_filtered", "squirrel_filtered", "actor"]     # same .npz format, not in PyG's class
NAMES = PYG_NAMES + FILTERED
BINARY = {"Minesweeper", "Tolokers", "Questions"}
NUM_CLASSES = {"Roman-empire": 18, "Amazon-ratings": 5, "Minesweeper": 2, "Tolokers": 2, "Questions": 2,
               "chameleon_filtered": 5, "squirrel_filtered": 5, "actor": 5}
NPZ_KEYS = ("node_features", "node_labels", "edges", "train_masks", "val_masks", "test_masks")


def check_npz(path: Path, dataset: str) -> None:
    """What PyG's loader reads from ``<name>.npz``, checked first so that a damaged or wrong file is
    refused naming the file and the problem (and never becomes a processed cache)."""
    try:
        with np.load(path, allow_pickle=False) as z:   # never unpickle: a data file is not code
            missing = [k for k in NPZ_KEYS if k not in z.files]
            if missing:
                raise DataError(f"{path}: missing arrays {missing}; a {dataset} file holds {list(NPZ_KEYS)}")
            arrays = {k: z[k] for k in NPZ_KEYS}
    except DataError:
        raise
    except Exception as e:  # noqa: BLE001 - truncated zip, bad header, pickled arrays: all 'unreadable'
        raise DataError(f"{path}: not a readable .npz file ({type(e).__name__}: {str(e)[:160]})") from None
    for k in ("train_masks", "val_masks", "test_masks"):
        if arrays[k].ndim != 2:
            raise DataError(f"{path}: {k} must be a 2-D array [splits, nodes], got shape {list(arrays[k].shape)}")
    check_arrays(str(path), x=arrays["node_features"], y=arrays["node_labels"], num_classes=NUM_CLASSES[dataset],
                 edges=arrays["edges"], edges_rows=True,
                 masks={k: arrays[k] for k in ("train_masks", "val_masks", "test_masks")})


@dataclass
class HeterophilousParams:
    dataset: str = field(default="Minesweeper", metadata=spec(choices=NAMES))
    split: str = field(default="random", metadata=spec(
        choices=["random", "fixed"], help="random: fractions below (FedGSP 20/40/40); fixed: the dataset's masks"))
    fixed_split_index: int = field(default=0, metadata=spec(min=0, max=9))
    train: float = field(default=0.2, metadata=spec(gt=0.0, max=1.0))
    val: float = field(default=0.4, metadata=spec(min=0.0, max=1.0))
    split_seed: int | None = field(default=None, metadata=spec(help="null: the run's seed (FED-PUB used 1234)"))


def platonov_dataset(root: str, name: str):
    """PyG's HeterophilousGraphDataset for any of Platonov et al.'s .npz files: its download (the
    authors' repository), processing (edges made undirected, masks [nodes, splits]) and folders are
    those of the five names its constructor admits; the filtered chameleon/squirrel and actor files
    have the same arrays, so only that name check is skipped."""
    from torch_geometric.data import InMemoryDataset
    from torch_geometric.datasets import HeterophilousGraphDataset

    class PlatonovDataset(HeterophilousGraphDataset):
        def __init__(self, root: str, name: str):   # noqa: D107 - HeterophilousGraphDataset's, without its name list
            self.name = name
            InMemoryDataset.__init__(self, root)
            self.load(self.processed_paths[0])

    if name in PYG_NAMES:
        return HeterophilousGraphDataset(root, name)
    return PlatonovDataset(root, name)


@DATASETS.register("heterophilous", params=HeterophilousParams, task="node",
                   folder=lambda p: f"{p.dataset.lower().replace('-', '_')}/raw")
def load_heterophilous(p: HeterophilousParams, env: DataEnv) -> GraphDataset:
    folder = p.dataset.lower().replace("-", "_")
    raw = [f"{folder}.npz"]
    have_raw = (env.data_dir / folder / "raw" / raw[0]).exists()
    root = staged_root(env.data_dir, folder, raw) if have_raw else env.data_dir
    if not have_raw:
        env.log.info("%s not found under %s: PyG will download it", p.dataset, env.data_dir)
    ds = prepared_ecosystem(p.dataset, root, folder, lambda r: platonov_dataset(str(r), p.dataset),
                            check_raw=lambda d: check_npz(d / "raw" / raw[0], p.dataset))
    data = ds[0]
    if p.split == "random":
        seed = env.seed if p.split_seed is None else p.split_seed
        data.train_mask, data.val_mask, data.test_mask = random_split(data.num_nodes, p.train, p.val, seed)
    else:
        i = p.fixed_split_index
        if data.train_mask.dim() != 2 or i >= data.train_mask.size(1):
            raise DataError(f"{root / folder}: dataset.fixed_split_index={i}, but the file holds "
                            f"{data.train_mask.size(-1) if data.train_mask.dim() == 2 else 1} fixed split(s)")
        data.train_mask, data.val_mask, data.test_mask = (data.train_mask[:, i], data.val_mask[:, i],
                                                          data.test_mask[:, i])
    info = DatasetInfo(name=folder, task="node", num_classes=int(ds.num_classes), source="real",
                       main_metric="roc_auc" if p.dataset in BINARY else "accuracy",
                       extra={"root": str(root), "split": p.split})
    return GraphDataset(data, info)


NUM_NODES = {"Roman-empire": 22662, "Amazon-ratings": 24492, "Minesweeper": 10000, "Tolokers": 11758,
             "Questions": 48921, "chameleon_filtered": 890, "squirrel_filtered": 2223, "actor": 7600}
load_heterophilous.check_config = clients_fit(lambda p: NUM_NODES.get(p.dataset))
