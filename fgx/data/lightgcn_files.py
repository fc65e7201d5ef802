"""LightGCN-format interaction files by path (Gowalla, Yelp2018, Amazon-Book as released with
LightGCN): one line per user, ``user item1 item2 ...``, in ``train.txt`` and ``test.txt``. The test
file is the test split; ``val_fraction`` of each user's training items (at least one when the user
has 3 or more) becomes the validation split."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fgx.config import spec
from fgx.data.base import DataEnv, DataError, DatasetInfo, GraphDataset
from fgx.recsys.bipartite import Interactions, per_user_split, to_graph
from fgx.registry import DATASETS


@dataclass
class LightGCNFilesParams:
    train_path: str = field(default="", metadata=spec(help="LightGCN train.txt"))
    test_path: str = field(default="", metadata=spec(help="LightGCN test.txt"))
    val_fraction: float = field(default=0.1, metadata=spec(min=0.0, max=0.5))
    split_seed: int = field(default=42, metadata=spec(min=0))


def read_adjacency_lines(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(user, item) pairs from ``user item item ...`` lines; a non-integer token names file and line."""
    try:
        return _read_adjacency(path)
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def _read_adjacency(path: Path) -> tuple[np.ndarray, np.ndarray]:
    users, items = [], []
    with open(path, encoding="utf-8") as f:
        for no, line in enumerate(f, 1):
            parts = line.split()
            if not parts:
                continue
            try:
                ids = [int(t) for t in parts]
            except ValueError:
                raise DataError(f"{path}, line {no}: expected integer ids 'user item item ...', "
                                f"got {line.strip()[:60]!r}") from None
            if any(v < 0 for v in ids):
                raise DataError(f"{path}, line {no}: negative id")
            if any(v >= 2**62 for v in ids):
                raise DataError(f"{path}, line {no}: id too large for an index")
            users.extend([ids[0]] * (len(ids) - 1))
            items.extend(ids[1:])
    return np.asarray(users, dtype=np.int64), np.asarray(items, dtype=np.int64)


@DATASETS.register("lightgcn_files", params=LightGCNFilesParams, task="ranking")
def load_lightgcn_files(p: LightGCNFilesParams, env: DataEnv) -> GraphDataset:
    paths = []
    for key in ("train_path", "test_path"):
        v = getattr(p, key)
        if not v:
            raise DataError(f"dataset.{key} is empty: give the LightGCN {key.split('_')[0]}.txt path")
        path = Path(v).expanduser()
        if not path.exists():
            raise DataError(f"dataset.{key}={path} does not exist")
        paths.append(path)
    tr_u, tr_i = read_adjacency_lines(paths[0])
    te_u, te_i = read_adjacency_lines(paths[1])
    if len(tr_u) == 0:
        raise DataError(f"{paths[0]}: no interactions")
    # LightGCN ids are already dense 0..n-1; keep them so the files' ids stay meaningful
    nu = int(max(tr_u.max(), te_u.max(initial=0))) + 1
    ni = int(max(tr_i.max(), te_i.max(initial=0))) + 1
    train = Interactions(tr_u, tr_i, nu, ni)
    split_train = np.where(per_user_split(train, p.val_fraction, 0.0, p.split_seed) == 1, 1, 0) \
        if p.val_fraction > 0 else np.zeros(len(tr_u), dtype=np.int8)
    x = Interactions(np.concatenate([tr_u, te_u]), np.concatenate([tr_i, te_i]), nu, ni)
    split = np.concatenate([split_train, np.full(len(te_u), 2)]).astype(np.int8)
    info = DatasetInfo(name="lightgcn_files", task="ranking", num_classes=0, main_metric="ndcg@20", source="real",
                       extra={"users": nu, "items": ni, "interactions": len(x.users),
                              "train_file": str(paths[0]), "test_file": str(paths[1])})
    return GraphDataset(to_graph(x, split), info)
