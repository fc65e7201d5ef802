"""Planetoid citation graphs (Cora, CiteSeer, PubMed) through PyG's own loader.

With the raw files under ``<data_dir>/<Name>/raw`` it works offline; otherwise PyG downloads them."""
from __future__ import annotations

import pickle
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fgx.config import spec
from fgx.data.base import DataEnv, DataError, DatasetInfo, GraphDataset, clients_fit, random_split
from fgx.data.prepare import staged_root
from fgx.data.prepare import prepared_ecosystem
from fgx.registry import DATASETS

RAW = [f"ind.{{}}.{s}" for s in ("x", "y", "tx", "ty", "allx", "ally", "graph", "test.index")]
NUM_CLASSES = {"Cora": 7, "CiteSeer": 6, "PubMed": 3}

# The classes a Planetoid pickle may name: NumPy arrays, SciPy CSR matrices, the graph's defaultdict
# of lists. Anything else (os.system, builtins.eval, ...) is refused before PyG unpickles the file.
PICKLE_GLOBALS = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
                  ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
                  ("numpy._core.multiarray", "scalar"), ("scipy.sparse.csr", "csr_matrix"),
                  ("scipy.sparse._csr", "csr_matrix"), ("collections", "defaultdict"), ("builtins", "list"),
                  ("builtins", "dict"), ("builtins", "int"), ("copy_reg", "_reconstructor"),
                  ("copyreg", "_reconstructor"), ("builtins", "object"),
                  ("_codecs", "encode")}   # how Python 3 writes bytes into a protocol-2 pickle
PICKLE_GLOBALS |= {("__builtin__", n) for m, n in PICKLE_GLOBALS if m == "builtins"}   # Python 2 pickles


class _PlanetoidUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) not in PICKLE_GLOBALS:
            raise DataError(f"refers to {module}.{name}, which a Planetoid file never holds (refused unread: "
                            f"unpickling it could run code)")
        return super().find_class(module, name)


def _unpickle(path: Path):
    try:
        with open(path, "rb") as f:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return _PlanetoidUnpickler(f, encoding="latin1").load()
    except DataError as e:
        raise DataError(f"{path}: {e}") from None
    except Exception as e:  # noqa: BLE001 - truncated or foreign bytes: one clear message
        raise DataError(f"{path}: not a readable Planetoid pickle ({type(e).__name__}: {str(e)[:160]})") from None


def _matrix(path: Path, obj, what: str) -> np.ndarray:
    if hasattr(obj, "todense"):
        try:
            obj = np.asarray(obj.todense())
        except Exception as e:  # noqa: BLE001 - a sparse matrix with inconsistent internals
            raise DataError(f"{path}: a damaged sparse matrix ({type(e).__name__}: {str(e)[:120]})") from None
    if not isinstance(obj, np.ndarray) or obj.ndim != 2 or not np.issubdtype(obj.dtype, np.number):
        shape = list(obj.shape) if isinstance(obj, np.ndarray) else type(obj).__name__
        raise DataError(f"{path}: {what} must be a 2-D numeric matrix, got {shape}"
                        f"{'' if not isinstance(obj, np.ndarray) else f' of dtype {obj.dtype}'}")
    if np.issubdtype(obj.dtype, np.floating) and not np.isfinite(obj).all():
        r, c = map(int, np.argwhere(~np.isfinite(obj))[0])
        raise DataError(f"{path}: {what} holds NaN or infinite values (first at row {r}, column {c})")
    return obj


def check_raw_files(raw: Path, name: str) -> None:
    """The eight Planetoid files, checked with a restricted unpickler before PyG reads them: each
    problem names its file (shapes, classes, graph and test indices)."""
    prefix = name.lower()
    path = {k: raw / f"ind.{prefix}.{k}" for k in ("x", "y", "tx", "ty", "allx", "ally", "graph", "test.index")}
    for k, pth in path.items():
        if not pth.is_file():
            raise DataError(f"{pth}: missing (a Planetoid dataset needs {[p.name for p in path.values()]})")
    m = {k: _matrix(path[k], _unpickle(path[k]), "features" if "x" in k else "one-hot labels")
         for k in ("x", "y", "tx", "ty", "allx", "ally")}
    classes = NUM_CLASSES[name]
    for feats, labels in (("x", "y"), ("tx", "ty"), ("allx", "ally")):
        if m[feats].shape[0] != m[labels].shape[0]:
            raise DataError(f"{path[labels]}: {m[labels].shape[0]} label rows for {m[feats].shape[0]} feature rows "
                            f"in {path[feats].name}")
        if m[feats].shape[1] != m["x"].shape[1]:
            raise DataError(f"{path[feats]}: {m[feats].shape[1]} feature columns, {path['x'].name} has {m['x'].shape[1]}")
        if m[labels].shape[1] != classes:
            raise DataError(f"{path[labels]}: labels for {m[labels].shape[1]} classes; {name} has {classes}")
    if m["y"].shape[0] + 500 > m["allx"].shape[0]:
        raise DataError(f"{path['allx']}: {m['allx'].shape[0]} rows cannot hold the {m['y'].shape[0]} training "
                        f"and 500 validation nodes")
    try:
        text = path["test.index"].read_text(encoding="ascii")
        test = np.array([int(t) for t in text.split()], dtype=np.int64)
    except (UnicodeDecodeError, ValueError, OverflowError) as e:
        raise DataError(f"{path['test.index']}: expected one integer node index per line ({type(e).__name__})") from None
    n = m["allx"].shape[0] + m["tx"].shape[0]
    lo, hi = m["allx"].shape[0], (n if prefix != "citeseer" else None)
    if len(test) != m["tx"].shape[0] and prefix != "citeseer":
        raise DataError(f"{path['test.index']}: {len(test)} test indices for {m['tx'].shape[0]} rows in {path['tx'].name}")
    if len(test) == 0 or len(np.unique(test)) != len(test) or test.min() < lo or (hi is not None and test.max() >= hi):
        raise DataError(f"{path['test.index']}: test indices must be distinct and lie in [{lo}, {hi or 'inf'}); "
                        f"found {len(test)} values in [{test.min() if len(test) else '-'}, {test.max() if len(test) else '-'}]")
    if prefix == "citeseer":
        n = m["allx"].shape[0] + int(test.max() - test.min()) + 1
    graph = _unpickle(path["graph"])
    if not isinstance(graph, dict):
        raise DataError(f"{path['graph']}: must be a dict of node -> neighbour list, got {type(graph).__name__}")
    for node, nbrs in graph.items():
        ok = isinstance(node, int) and isinstance(nbrs, list) and all(isinstance(v, int) for v in nbrs)
        if not ok:
            raise DataError(f"{path['graph']}: node {node!r} -> {str(nbrs)[:40]}: expected int -> list of ints")
        bad = [v for v in [node, *nbrs] if not 0 <= v < n]
        if bad:
            raise DataError(f"{path['graph']}: node index {bad[0]} outside [0, {n})")


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


@DATASETS.register("planetoid", params=PlanetoidParams, task="node", folder=lambda p: f"{p.dataset}/raw")
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
    try:
        ds = prepared_ecosystem(p.dataset, root, p.dataset, lambda r: Planetoid(
            str(r), p.dataset, split="full" if p.split == "full" else "public", transform=transform),
            check_raw=lambda d: check_raw_files(d / "raw", p.dataset))
    except DataError as e:
        if have_raw:
            raise
        missing = [r for r in raw_files if not (env.data_dir / p.dataset / "raw" / r).exists()]
        raise DataError(f"{e} (Planetoid {p.dataset} reads {env.data_dir / p.dataset / 'raw'}/: missing "
                        f"{', '.join(missing)})") from None
    data = ds[0]
    if p.split == "random":
        data.train_mask, data.val_mask, data.test_mask = random_split(
            data.num_nodes, p.train, p.val, env.seed if p.split_seed is None else p.split_seed)
    info = DatasetInfo(name=p.dataset.lower(), task="node", num_classes=ds.num_classes, main_metric="accuracy",
                       source="real", extra={"root": str(root), "split": p.split},
                       features_public=p.features_public)
    return GraphDataset(data, info)


NUM_NODES = {"Cora": 2708, "CiteSeer": 3327, "PubMed": 19717}      # the published raw files
load_planetoid.check_config = clients_fit(lambda p: NUM_NODES.get(p.dataset))
