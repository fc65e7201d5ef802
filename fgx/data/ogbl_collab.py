"""ogbl-collab through OGB's PygLinkPropPredDataset (optional extra ``ogb``; downloads into the data root):
authors as nodes (128 features: their papers' mean word embedding), a collaboration as an edge with its
year. Link task only (``task=link``).

OGB's graph object holds the training collaborations only; fgx takes the pairs of OGB's train, valid and
test split files with their years (``edge_time``) as one graph, so the partitioner sees the whole
graph and ``task.split=temporal`` splits it by the year a pair first appears: test 2019, validation
2018, train up to 2017 (OGB's years; OGB's valid/test sets also repeat pairs seen before, which fgx's
split keeps in the year they first appeared, so that no validation or test pair is ever in a training
graph). ``task.split=random`` splits the same pairs at random."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fgx.config import ConfigError
from fgx.data.base import DataEnv, DataError, DatasetInfo, GraphDataset, clients_fit, pyg_safe_globals
from fgx.data.prepare import prepared_ecosystem
from fgx.registry import DATASETS

FOLDER = "ogbl_collab"
RAW_FILES = ("edge.csv.gz", "edge_weight.csv.gz", "edge_year.csv.gz", "node-feat.csv.gz", "num-node-list.csv.gz",
             "num-edge-list.csv.gz")
SPLIT_FILES = ("train.pt", "valid.pt", "test.pt")
NUM_NODES = 235_868


@dataclass
class OgblCollabParams:
    pass


def missing_files(folder: Path) -> list[str]:
    want = ["RELEASE_v1.txt", *(f"raw/{f}" for f in RAW_FILES), *(f"split/time/{f}" for f in SPLIT_FILES)]
    return [f for f in want if not (folder / f).is_file()]


@DATASETS.register("ogbl_collab", params=OgblCollabParams, task="link", provides=("edge_time",),
                   folder=lambda p: FOLDER)
def load_ogbl_collab(p: OgblCollabParams, env: DataEnv) -> GraphDataset:
    try:
        from ogb.linkproppred import PygLinkPropPredDataset
    except ImportError:
        raise ConfigError("dataset", "ogbl_collab", "a dataset whose package is installed: pip install 'fgx[ogb]'") from None
    import torch
    from torch_geometric.data import Data

    def build(root):
        # OGB calls torch.load without weights_only (since torch 2.6: weights_only=True): allow PyG's Data only
        with torch.serialization.safe_globals(pyg_safe_globals()):
            return PygLinkPropPredDataset("ogbl-collab", root=str(root))

    folder = env.data_dir / FOLDER
    missing = missing_files(folder)
    try:
        ds = prepared_ecosystem("ogbl-collab", env.data_dir, FOLDER, build)
        split = ds.get_edge_split()
    except DataError as e:
        if not missing:
            raise
        raise DataError(f"{e} (OGB's ogbl-collab reads {folder}/: missing {', '.join(missing)})") from None
    parts = [split[k] for k in ("train", "valid", "test")]
    edges = torch.cat([s["edge"] for s in parts]).t().long()
    years = torch.cat([s["year"].view(-1) for s in parts]).long()
    x = ds[0].x
    if edges.numel() == 0 or int(edges.max()) >= x.size(0) or int(edges.min()) < 0:
        raise DataError(f"{folder}/split/time: edges must join nodes in [0, {x.size(0)})")
    data = Data(x=x, edge_index=torch.cat([edges, edges.flip(0)], 1), num_nodes=x.size(0))
    data.edge_time = torch.cat([years, years])
    info = DatasetInfo(name="ogbl_collab", task="link", num_classes=2, main_metric="hits@50", source="real",
                       extra={"root": str(env.data_dir), "years": [int(years.min()), int(years.max())]})
    return GraphDataset(data, info)


load_ogbl_collab.check_config = clients_fit(lambda p: NUM_NODES)
