"""MovieLens as implicit-feedback ranking data (every rating is one interaction).

``movielens100k`` reads ``<data_dir>/ml-100k/u.data`` (tab-separated user, item, rating, time) and
downloads GroupLens' ml-100k.zip there when the file is missing; ``movielens1m`` reads a
``ratings.dat`` (``::``-separated) given by path. A malformed line fails with the file and line."""
from __future__ import annotations

import math
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fgx.config import spec
from fgx.data.base import DataEnv, DataError, DatasetInfo, GraphDataset
from fgx.recsys.bipartite import Interactions, densify, k_core, min_user_interactions, per_user_split, to_graph
from fgx.registry import DATASETS

ML100K_URL = "https://files.grouplens.org/datasets/movielens/ml-100k.zip"


@dataclass
class RatingsFilter:
    k_core: int = field(default=0, metadata=spec(min=0, help="k-core filter (0: off)"))
    min_user_interactions: int = field(default=0, metadata=spec(
        min=0, help="the paper's 'imbalanced' filter: keep users with >= this many interactions (0: off)"))
    val_fraction: float = field(default=0.1, metadata=spec(min=0.0, max=0.5))
    test_fraction: float = field(default=0.1, metadata=spec(gt=0.0, max=0.5))
    split_seed: int = field(default=42, metadata=spec(min=0))


@dataclass
class ML100KParams(RatingsFilter):
    download: bool = field(default=True, metadata=spec(help="download ml-100k.zip when u.data is missing"))


@dataclass
class ML1MParams(RatingsFilter):
    path: str = field(default="", metadata=spec(help="path to ratings.dat (UserID::MovieID::Rating::Timestamp)"))


def read_ratings(path: Path, sep: str, min_fields: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Raw (user, item) ids from a ratings text file; every non-empty line needs integer user and
    item ids in its first two fields."""
    users, items = [], []
    splitter = re.compile(sep)
    with open(path, encoding="latin-1") as f:
        for no, line in enumerate(f, 1):
            line = line.rstrip("\r\n")       # not strip(): an empty first field must stay a field
            if not line.strip():
                continue
            parts = splitter.split(line)
            try:
                if len(parts) < min_fields:
                    raise ValueError(f"expected at least {min_fields} fields, got {len(parts)}")
                u, i = int(parts[0]), int(parts[1])
                if u < 0 or i < 0:
                    raise ValueError("negative user or item id")
                if max(u, i) >= 2**62:
                    raise ValueError("id too large for an index")
                if min_fields >= 3 and not math.isfinite(float(parts[2])):
                    raise ValueError(f"rating {parts[2]!r} is not a finite number")
                users.append(u)
                items.append(i)
            except ValueError as e:
                raise DataError(f"{path}, line {no}: malformed ratings line {line[:60]!r} ({e})") from None
    if not users:
        raise DataError(f"{path}: no ratings found")
    return np.asarray(users, dtype=np.int64), np.asarray(items, dtype=np.int64)


def build_ranking_dataset(name: str, x: Interactions, p: RatingsFilter, source: str, extra: dict) -> GraphDataset:
    if p.k_core:
        x = k_core(x, p.k_core)
    if p.min_user_interactions:
        x = min_user_interactions(x, p.min_user_interactions)
    split = per_user_split(x, p.val_fraction, p.test_fraction, p.split_seed)
    data = to_graph(x, split)
    info = DatasetInfo(name=name, task="ranking", num_classes=0, main_metric="ndcg@20", source=source,
                       extra={"users": x.num_users, "items": x.num_items, "interactions": len(x.users), **extra})
    return GraphDataset(data, info)


def ml100k_file(data_dir: Path, download: bool) -> Path:
    path = Path(data_dir) / "ml-100k" / "u.data"
    if path.exists():
        return path
    if not download:
        raise DataError(f"{path} not found (set dataset.download=true or place GroupLens' ml-100k there)")
    from fgx.data.prepare import preparation_lock

    # parallel jobs download once; the file appears only complete (extracted beside it, then renamed)
    with preparation_lock(Path(data_dir) / ".ml-100k.lock", f"MovieLens-100K under {data_dir}"):
        if not path.exists():
            _download_ml100k(path)
    return path


def _download_ml100k(path: Path) -> None:
    import os
    import shutil
    import tempfile
    import urllib.request

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".ml-100k.tmp-", dir=path.parent.parent))
    try:
        zpath = tmp / "ml-100k.zip"
        try:
            urllib.request.urlretrieve(ML100K_URL, zpath)
            with zipfile.ZipFile(zpath) as z:
                z.extract("ml-100k/u.data", tmp)
        except (OSError, zipfile.BadZipFile, KeyError) as e:
            raise DataError(f"MovieLens-100K: could not download {ML100K_URL} to {path} ({type(e).__name__}: {e}); "
                            f"place GroupLens' ml-100k/u.data there yourself") from None
        os.replace(tmp / "ml-100k" / "u.data", path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@DATASETS.register("movielens100k", params=ML100KParams, task="ranking")
def load_movielens100k(p: ML100KParams, env: DataEnv) -> GraphDataset:
    path = ml100k_file(env.data_dir, p.download)
    u, i = read_ratings(path, r"\t", min_fields=3)
    return build_ranking_dataset("movielens100k", densify(u, i), p, "real", {"file": str(path)})


@DATASETS.register("movielens1m", params=ML1MParams, task="ranking")
def load_movielens1m(p: ML1MParams, env: DataEnv) -> GraphDataset:
    if not p.path:
        raise DataError("dataset.path is empty: give the path to MovieLens-1M's ratings.dat")
    path = Path(p.path).expanduser()
    if not path.exists():
        raise DataError(f"dataset.path={path} does not exist")
    u, i = read_ratings(path, "::", min_fields=3)
    return build_ranking_dataset("movielens1m", densify(u, i), p, "real", {"file": str(path)})
