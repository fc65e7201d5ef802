"""ogbn-arxiv through OGB's PygNodePropPredDataset (optional extra ``ogb``; downloads into the data
root). FedGSP setting: undirected, largest connected component, random 5/47.5/47.5 split."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fgx.config import ConfigError, spec
from fgx.data.base import DataEnv, DataError, DatasetInfo, GraphDataset, pyg_safe_globals, random_split
from fgx.data.prepare import prepared_ecosystem
from fgx.registry import DATASETS


@dataclass
class OgbnArxivParams:
    split: str = field(default="random", metadata=spec(choices=["random", "official"]))
    train: float = field(default=0.05, metadata=spec(gt=0.0, max=1.0))
    val: float = field(default=0.475, metadata=spec(min=0.0, max=1.0))
    lcc: bool = True
    split_seed: int | None = None


NUM_CLASSES = 40
RAW_FILES = ("edge.csv.gz", "num-node-list.csv.gz", "num-edge-list.csv.gz", "node-feat.csv.gz",
             "node-label.csv.gz", "node_year.csv.gz")


def _read_gz_csv(path: Path, floats: bool = False):
    import numpy as np
    import pandas as pd

    if not path.is_file():
        raise DataError(f"{path}: missing (ogbn-arxiv needs raw/{', raw/'.join(RAW_FILES)} and split/time/)")
    try:
        frame = pd.read_csv(path, compression="gzip", header=None, dtype=str, keep_default_na=False,
                            skip_blank_lines=False)   # a blank line is a missing value, not nothing
    except Exception as e:  # noqa: BLE001 - not gzip, truncated, not CSV: one clear message
        raise DataError(f"{path}: not a readable gzip CSV ({type(e).__name__}: {str(e)[:160]})") from None
    values = frame.apply(pd.to_numeric, errors="coerce").to_numpy(dtype=np.float64)
    if values.size == 0:
        raise DataError(f"{path}: empty")
    bad = np.isnan(values) if floats else ~np.isfinite(values) | (values != np.round(values))
    if bad.any():
        r, c = map(int, np.argwhere(bad)[0])
        what = "a number" if floats else "an integer"
        raise DataError(f"{path}, line {r + 1}, column {c + 1}: {frame.iat[r, c]!r} is not {what}")
    if not floats and np.abs(values).max() >= 2**53:
        raise DataError(f"{path}: an index too large to be a node index")
    return values if floats else values.astype(np.int64)


def check_raw_folder(folder: Path) -> None:
    """OGB's ogbn-arxiv files, checked before OGB processes them (OGB itself would fail inside
    pandas or torch, or prompt on a terminal when RELEASE_v1.txt is missing)."""
    from fgx.data.checks import check_arrays

    if not (folder / "RELEASE_v1.txt").is_file():
        raise DataError(f"{folder}: RELEASE_v1.txt missing, so this is not an intact ogbn-arxiv folder (OGB "
                        f"would ask to re-download it): delete {folder} to download it again, or copy intact files")
    raw = folder / "raw"
    edges = _read_gz_csv(raw / "edge.csv.gz")
    nodes = _read_gz_csv(raw / "num-node-list.csv.gz")
    num_edges = _read_gz_csv(raw / "num-edge-list.csv.gz")
    x = _read_gz_csv(raw / "node-feat.csv.gz", floats=True)
    y = _read_gz_csv(raw / "node-label.csv.gz")
    year = _read_gz_csv(raw / "node_year.csv.gz")
    n = int(nodes.reshape(-1)[0])
    if nodes.size != 1 or n != x.shape[0]:
        raise DataError(f"{raw / 'num-node-list.csv.gz'}: says {nodes.reshape(-1).tolist()} nodes; "
                        f"node-feat.csv.gz has {x.shape[0]} rows")
    if num_edges.size != 1 or int(num_edges.reshape(-1)[0]) != edges.shape[0]:
        raise DataError(f"{raw / 'num-edge-list.csv.gz'}: says {num_edges.reshape(-1).tolist()} edges; "
                        f"edge.csv.gz has {edges.shape[0]} rows")
    if y.shape != (n, 1):
        raise DataError(f"{raw / 'node-label.csv.gz'}: one label per node ({n}) expected, got shape {list(y.shape)}")
    if year.shape != (n, 1):
        raise DataError(f"{raw / 'node_year.csv.gz'}: one year per node expected, got shape {list(year.shape)}")
    check_arrays(str(raw / "node-feat.csv.gz"), x=x)
    check_arrays(str(raw / "node-label.csv.gz"), y=y[:, 0], num_classes=NUM_CLASSES)
    check_arrays(str(raw / "edge.csv.gz"), edges=edges, edges_rows=True, x=x)


def official_split(folder: Path, num_nodes: int) -> dict:
    """OGB's time split (split/time/{train,valid,test}.csv.gz), each file checked."""
    import torch

    out = {}
    for part in ("train", "valid", "test"):
        path = folder / "split" / "time" / f"{part}.csv.gz"
        idx = _read_gz_csv(path)
        if idx.shape[1] != 1 or idx.min() < 0 or idx.max() >= num_nodes:
            raise DataError(f"{path}: one node index in [0, {num_nodes}) per line expected")
        out[part] = torch.from_numpy(idx[:, 0])
    return out


@DATASETS.register("ogbn_arxiv", params=OgbnArxivParams, task="node", folder=lambda p: "ogbn_arxiv")
def load_ogbn_arxiv(p: OgbnArxivParams, env: DataEnv) -> GraphDataset:
    try:
        from ogb.nodeproppred import PygNodePropPredDataset
    except ImportError:
        raise ConfigError("dataset", "ogbn_arxiv", "a dataset whose package is installed: pip install 'fgx[ogb]'") from None
    import torch
    import torch_geometric.transforms as T

    def build(root):
        # OGB calls torch.load without weights_only; since torch 2.6 that means weights_only=True,
        # which refuses PyG's Data unless its classes are allowed (and nothing else is)
        with torch.serialization.safe_globals(pyg_safe_globals()):
            return PygNodePropPredDataset("ogbn-arxiv", root=str(root))

    ds = prepared_ecosystem("ogbn-arxiv", env.data_dir, "ogbn_arxiv", build,
                            check_raw=check_raw_folder)
    data = ds[0]
    data.y = data.y.view(-1)
    if p.split == "official":
        idx = official_split(env.data_dir / "ogbn_arxiv", data.num_nodes)
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
