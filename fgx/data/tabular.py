"""Tabular regression datasets for decentralised learning: rows are items (no edges), spread over
the nodes of a communication graph by the ``topology`` partitioner.

``diabetes``: scikit-learn's bundled copy (442 × 10, offline). ``housing``: California Housing
(20,640 × 8, OpenML 823) from a CSV (``path``; 8 feature columns then the target, header row) or
scikit-learn's downloader into the data root. ``synthetic_regression``: an offline generator of the
same shape (20,640 × 8, a nonlinear target on Housing's scale) so that a Housing experiment's
participation arithmetic (rows per node, batches, T) holds without the download. Features are
standardised with training statistics."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from fgx.config import spec
from fgx.data.base import DataEnv, DataError, DatasetInfo, GraphDataset, random_split
from fgx.registry import DATASETS


@dataclass
class TabularParams:
    test: float = field(default=0.2, metadata=spec(gt=0.0, max=0.9, help="test fraction (rest is training)"))
    standardize_target: bool = field(default=True, metadata=spec(help="z-score the target with training statistics"))
    path: str | None = field(default=None, metadata=spec(help="housing: CSV file instead of the sklearn download"))


def _as_dataset(x: np.ndarray, y: np.ndarray, p: TabularParams, env: DataEnv, name: str, extra: dict) -> GraphDataset:
    from torch_geometric.data import Data

    n = len(y)
    train, _, test = random_split(n, 1.0 - p.test, 0.0, env.seed)
    xt = torch.tensor(x, dtype=torch.float32)
    yt = torch.tensor(y, dtype=torch.float32)
    mu, sd = xt[train].mean(0), xt[train].std(0).clamp(min=1e-8)
    xt = (xt - mu) / sd
    if p.standardize_target:
        yt = (yt - yt[train].mean()) / yt[train].std().clamp(min=1e-8)
    data = Data(x=xt, y=yt, edge_index=torch.zeros(2, 0, dtype=torch.long), num_nodes=n)
    data.train_mask, data.val_mask, data.test_mask = train, torch.zeros(n, dtype=torch.bool), test
    info = DatasetInfo(name=name, task="regression", num_classes=0, main_metric="mse", source="real",
                       extra={"rows": n, "features": int(x.shape[1]), **extra})
    return GraphDataset(data, info)


def read_numeric_csv(f: Path) -> tuple[np.ndarray, np.ndarray]:
    """A header row, then rows of numbers: feature columns, the target last. Any cell that is not
    a finite number is a DataError naming the file, line and column."""
    import pandas as pd

    if not f.is_file():
        raise DataError(f"dataset.path: {f} does not exist")
    try:
        df = pd.read_csv(f, dtype=str, keep_default_na=False, encoding="utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"dataset.path: {f} is not UTF-8 text (byte {e.start})") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise DataError(f"dataset.path: {f}: {str(e).strip().splitlines()[-1]}") from None
    if df.shape[1] < 2 or len(df) < 2:
        raise DataError(f"dataset.path: {f} needs a header and at least 2 rows of >= 2 columns "
                        f"(features then the target); found {len(df)} rows x {df.shape[1]} columns")
    values = df.apply(pd.to_numeric, errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values)
    if bad.any():
        r, c = map(int, np.argwhere(bad)[0])
        raise DataError(f"dataset.path: {f}, line {r + 2}, column {c + 1} ({df.columns[c]!r}): "
                        f"{df.iat[r, c]!r} is not a finite number")
    return values[:, :-1], values[:, -1]


@DATASETS.register("diabetes", params=TabularParams, task="regression")
def load_diabetes(p: TabularParams, env: DataEnv) -> GraphDataset:
    from sklearn.datasets import load_diabetes as sk_load

    d = sk_load()
    return _as_dataset(d.data, d.target, p, env, "diabetes", {"origin": "sklearn.datasets.load_diabetes"})


@DATASETS.register("housing", params=TabularParams, task="regression")
def load_housing(p: TabularParams, env: DataEnv) -> GraphDataset:
    if p.path:
        x, y = read_numeric_csv(Path(p.path).expanduser())
        return _as_dataset(x, y, p, env, "housing", {"origin": str(Path(p.path).expanduser())})
    from sklearn.datasets import fetch_california_housing

    d = fetch_california_housing(data_home=str(env.data_dir / "sklearn"))
    return _as_dataset(d.data, d.target, p, env, "housing", {"origin": "sklearn.fetch_california_housing"})


@dataclass
class SyntheticRegressionParams(TabularParams):
    standardize_target: bool = field(default=False, metadata=spec(help="z-score the target (default: Housing's raw scale)"))
    rows: int = field(default=20640, metadata=spec(min=10, help="items (California Housing: 20,640)"))
    features: int = field(default=8, metadata=spec(min=2, help="feature columns (Housing: 8)"))
    noise: float = field(default=0.2, metadata=spec(min=0.0, max=0.95, help="share of the target variance that is noise"))
    nonlinear: bool = field(default=True, metadata=spec(help="false: a linear target"))
    generator_seed: int = field(default=0, metadata=spec(min=0, help="the data (the train/test split follows the run's seed)"))

    def validate(self, prefix: str) -> None:
        if self.path:
            from fgx.config import ConfigError
            raise ConfigError(f"{prefix}.path", self.path, "null (synthetic_regression generates its rows; "
                              "dataset=housing reads a CSV)")


def synthetic_regression_arrays(p: SyntheticRegressionParams) -> tuple[np.ndarray, np.ndarray]:
    """Rows x (features) and target y. A latent z ~ N(0, Σ) with a random correlation Σ; half the
    observed columns are z, half exp(z/2) (skewed like incomes or populations). The target mixes a
    linear part and (nonlinear) saturations, a sinusoid and pairwise products of z, standardised, then
    set to Housing's scale (mean 2.07, std 1.15, in $100k) with ``noise`` of its variance i.i.d.
    Gaussian: the MSE floor is noise·1.15² (0.26 at the default; least squares reaches 0.50 on a
    held-out 20 %, the training mean 1.41 — Housing: about 0.53–0.56 and 1.33)."""
    rng = np.random.default_rng(p.generator_seed)
    f = p.features
    a = rng.normal(size=(f, f)) / np.sqrt(f)
    cov = a @ a.T + np.eye(f)
    d = np.sqrt(np.diag(cov))
    z = rng.multivariate_normal(np.zeros(f), cov / np.outer(d, d), size=p.rows)
    x = z.copy()
    skewed = np.arange(f) % 2 == 1
    x[:, skewed] = np.exp(0.5 * z[:, skewed])
    signal = z @ rng.normal(size=f)
    if p.nonlinear:
        w = rng.normal(size=(4, f))
        signal = 1.5 * signal / signal.std() + 0.8 * np.tanh(1.5 * z @ w[0] / np.sqrt(f)) \
            + 0.5 * np.sin(2.0 * z @ w[1] / np.sqrt(f)) + 0.4 * (z @ w[2] / np.sqrt(f)) * (z @ w[3] / np.sqrt(f))
    signal = (signal - signal.mean()) / signal.std()
    y = 2.07 + 1.15 * (np.sqrt(1.0 - p.noise) * signal + np.sqrt(p.noise) * rng.normal(size=p.rows))
    return x, y


@DATASETS.register("synthetic_regression", params=SyntheticRegressionParams, task="regression")
def load_synthetic_regression(p: SyntheticRegressionParams, env: DataEnv) -> GraphDataset:
    x, y = synthetic_regression_arrays(p)
    ds = _as_dataset(x, y, p, env, "synthetic_regression",
                     {"origin": f"fgx generator (seed {p.generator_seed}, noise {p.noise}, "
                                f"{'nonlinear' if p.nonlinear else 'linear'})"})
    ds.info.source = "generated"
    return ds
