"""The classic heterophilous sets in Geom-GCN's files through PyG's own classes: Chameleon and Squirrel
(``WikipediaNetwork``, ``<data_dir>/<name>/geom_gcn/raw/``) and Actor (``Actor``,
``<data_dir>/actor_pyg/raw/``): ``out1_node_feature_label.txt``, ``out1_graph_edges.txt`` and ten
``<name>_split_0.6_0.2_<i>.npz`` (Geom-GCN's 60/20/20 splits). PyG downloads them when missing.
Geom-GCN's edges are directed; fgx makes them undirected (``dataset.undirected``) as OpenFGL and
Platonov et al. do. For the filtered Chameleon/Squirrel (duplicates removed) see ``heterophilous``."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fgx.config import spec
from fgx.data.base import DataEnv, DataError, DatasetInfo, GraphDataset, clients_fit, random_split
from fgx.data.checks import check_arrays
from fgx.data.prepare import prepared_ecosystem
from fgx.registry import DATASETS

NUM_CLASSES = 5          # Geom-GCN's five traffic (Wikipedia) or word-category (Actor) classes
SPLITS = 10
FOLDER = {"chameleon": "geom_gcn", "squirrel": "geom_gcn", "actor": "actor_pyg"}


def split_files(name: str) -> list[str]:
    return [f"{'film' if name == 'actor' else name}_split_0.6_0.2_{i}.npz" for i in range(SPLITS)]


def _table(path: Path, fields: int) -> list[list[str]]:
    """The tab-separated rows after Geom-GCN's header line, each with ``fields`` fields."""
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: not a readable text file ({type(e).__name__})") from None
    rows = [ln.split("\t") for ln in lines[1:] if ln.strip()]
    if not rows:
        raise DataError(f"{path}: no rows after the header line")
    for i, r in enumerate(rows):
        if len(r) != fields:
            raise DataError(f"{path}, line {i + 2}: expected {fields} tab-separated fields, got {len(r)}")
    return rows


def _ints(path: Path, line: int, values: list[str], what: str) -> list[int]:
    try:
        return [int(v) for v in values]
    except ValueError:
        raise DataError(f"{path}, line {line}: {what} must be integers, got {','.join(values)[:60]!r}") from None


def check_raw(raw: Path, name: str) -> None:
    """What PyG's WikipediaNetwork / Actor parse, checked first so that a damaged file is refused naming
    the file and line (PyG would fail inside ``int()`` or ``torch.tensor``, or index out of range)."""
    nodes = _table(raw / "out1_node_feature_label.txt", 3)
    ids, labels, dense = [], [], []
    for i, (nid, feats, label) in enumerate(nodes):
        path, line = raw / "out1_node_feature_label.txt", i + 2
        ids += _ints(path, line, [nid], "the node id")
        labels += _ints(path, line, [label], "the label")
        if name == "actor":       # indices of the node's non-zero features
            cols = _ints(path, line, feats.split(","), "feature indices")
            if min(cols) < 0:
                raise DataError(f"{path}, line {line}: negative feature index {min(cols)}")
        else:
            try:
                dense.append([float(v) for v in feats.split(",")])
            except ValueError:
                raise DataError(f"{path}, line {line}: features must be numbers, got {feats[:60]!r}") from None
    n = len(nodes)
    if sorted(ids) != list(range(n)):
        raise DataError(f"{raw / 'out1_node_feature_label.txt'}: node ids must be 0 … {n - 1}, each once")
    if dense and len({len(r) for r in dense}) != 1:
        raise DataError(f"{raw / 'out1_node_feature_label.txt'}: every node needs the same number of features")
    edges = _table(raw / "out1_graph_edges.txt", 2)
    e = np.array([_ints(raw / "out1_graph_edges.txt", i + 2, r, "edge endpoints") for i, r in enumerate(edges)])
    x = np.array(dense, dtype=np.float64) if dense else np.zeros((n, 1))
    y = np.array(labels)[np.argsort(ids)]
    check_arrays(str(raw / "out1_node_feature_label.txt"), x=x, y=y, num_classes=NUM_CLASSES)
    check_arrays(str(raw / "out1_graph_edges.txt"), y=y, edges=e, edges_rows=True)
    for f in split_files(name):
        masks = {}
        try:
            with np.load(raw / f, allow_pickle=False) as z:     # never unpickle: a data file is not code
                for k in ("train_mask", "val_mask", "test_mask"):
                    if k not in z.files:
                        raise DataError(f"{raw / f}: missing array {k!r}; a Geom-GCN split holds train_mask, "
                                        f"val_mask, test_mask")
                    masks[k] = z[k]
        except DataError:
            raise
        except Exception as ex:  # noqa: BLE001 - truncated zip, bad header, pickled arrays: all 'unreadable'
            raise DataError(f"{raw / f}: not a readable .npz file ({type(ex).__name__}: {str(ex)[:160]})") from None
        check_arrays(str(raw / f), y=y, masks=masks)


@dataclass
class GeomGcnParams:
    dataset: str = field(default="chameleon", metadata=spec(choices=list(FOLDER)))
    split: str = field(default="random", metadata=spec(
        choices=["random", "fixed"], help="random: fractions below (FedGSP 20/40/40); fixed: Geom-GCN's 60/20/20"))
    fixed_split_index: int = field(default=0, metadata=spec(min=0, max=SPLITS - 1))
    train: float = field(default=0.2, metadata=spec(gt=0.0, max=1.0))
    val: float = field(default=0.4, metadata=spec(min=0.0, max=1.0))
    split_seed: int | None = field(default=None, metadata=spec(help="null: the run's seed"))
    undirected: bool = field(default=True, metadata=spec(help="add each edge's reverse (Geom-GCN's are directed)"))


def _pyg_dataset(name: str, root: Path):
    """PyG's class for ``name`` whose raw/ and processed/ lie in ``root / FOLDER[name]``."""
    from torch_geometric.datasets import Actor, WikipediaNetwork

    if name == "actor":
        return Actor(str(root / FOLDER[name]))

    class Wiki(WikipediaNetwork):    # PyG's own layout <data_dir>/<name>/geom_gcn/, rooted one level down
        raw_dir = property(lambda self: str(Path(self.root) / "geom_gcn" / "raw"))
        processed_dir = property(lambda self: str(Path(self.root) / "geom_gcn" / "processed"))

    return Wiki(str(root), name)


@DATASETS.register("geom_gcn", params=GeomGcnParams, task="node",
                   folder=lambda p: f"{p.dataset + '/' if p.dataset != 'actor' else ''}{FOLDER[p.dataset]}/raw")
def load_geom_gcn(p: GeomGcnParams, env: DataEnv) -> GraphDataset:
    import torch
    from torch_geometric.utils import to_undirected

    # chameleon/squirrel: the root is <data_dir>/<name> (PyG's <root>/<name>/geom_gcn); actor: <data_dir>
    root = env.data_dir / p.dataset if p.dataset != "actor" else env.data_dir
    folder = FOLDER[p.dataset]
    raw = root / folder / "raw"
    if not all((raw / f).exists() for f in ["out1_node_feature_label.txt", "out1_graph_edges.txt",
                                            *split_files(p.dataset)]):
        env.log.info("%s: Geom-GCN's files not all under %s: PyG will download them", p.dataset, raw)
    ds = prepared_ecosystem(p.dataset, root, folder, lambda r: _pyg_dataset(p.dataset, r),
                            check_raw=lambda d: check_raw(d / "raw", p.dataset))
    data = ds[0]
    if p.undirected:
        data.edge_index = to_undirected(data.edge_index, num_nodes=data.num_nodes)
    if p.split == "random":
        seed = env.seed if p.split_seed is None else p.split_seed
        data.train_mask, data.val_mask, data.test_mask = random_split(data.num_nodes, p.train, p.val, seed)
    else:
        i = p.fixed_split_index
        data.train_mask, data.val_mask, data.test_mask = (data.train_mask[:, i], data.val_mask[:, i],
                                                          data.test_mask[:, i])
    data.y = data.y.to(torch.long)
    name = p.dataset if p.dataset != "actor" else "actor_pyg"
    info = DatasetInfo(name=name, task="node", num_classes=NUM_CLASSES, main_metric="accuracy", source="real",
                       extra={"root": str(root / folder), "split": p.split})
    return GraphDataset(data, info)


NUM_NODES = {"chameleon": 2277, "squirrel": 5201, "actor": 7600}
load_geom_gcn.check_config = clients_fit(lambda p: NUM_NODES.get(p.dataset))
