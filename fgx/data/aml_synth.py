"""AML transaction datasets (edge classification: is this transaction laundering?).

``aml_synth`` always generates AMLworld-like data (fgx.data.aml.generator). ``aml`` is the loader of
the presets (``aml_hi_small`` ...): it reads the Kaggle CSV when ``path`` (or the preset's file name
under the data root) exists, and otherwise generates the preset, unless ``source: real``. Both go
through the same CSV reader, so real and generated data share one code path."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fgx.config import ConfigError, spec
from fgx.data.aml.presets import PRESETS, REAL_FILES, get_preset
from fgx.data.base import DataEnv, DataError, DatasetInfo, GraphDataset
from fgx.registry import DATASETS

PRESET_NAMES = sorted(PRESETS)


@dataclass
class AmlParams:
    preset: str = field(default="tiny", metadata=spec(choices=PRESET_NAMES))
    scale: float = field(default=1.0, metadata=spec(gt=0.0, help="multiplies the preset's accounts and transactions"))
    data_seed: int = field(default=0, metadata=spec(help="generator seed (the data stay fixed across run seeds)"))
    source: str = field(default="auto", metadata=spec(
        choices=["auto", "real", "generated"], help="auto: the real CSV if found, else generate"))
    path: str | None = field(default=None, metadata=spec(help="a Kaggle CSV; null: <data_dir>/aml/<preset file>"))
    split: str = field(default="days", metadata=spec(choices=["days", "fraction"]))
    split_days: list[int] | None = field(default=None, metadata=spec(
        help="[train_lo, train_hi, val_lo, val_hi, test_lo, test_hi]; null: the preset's (paper) days"))
    ports: bool = True
    timestamp_feature: bool = field(default=True, metadata=spec(
        help="the transaction time as an edge feature (Multi-GNN); test days lie outside the training range"))
    time_deltas: bool = False
    cross_bank_rate: float | None = field(default=None, metadata=spec(
        min=0.0, max=1.0, help="generated: chance a pattern member comes from any bank; null: preset's"))

    def validate(self, prefix: str) -> None:
        if self.split_days is not None and len(self.split_days) != 6:
            raise ConfigError(f"{prefix}.split_days", self.split_days, "6 day numbers or null")


def resolve_csv(p: AmlParams, env: DataEnv, generated_only: bool) -> tuple[Path, str, bool]:
    """(csv path, "real" | "generated", cache hit)."""
    from fgx.data.aml.cache import cache_dir, generate_csv

    if not generated_only and p.source != "generated":
        real = Path(p.path) if p.path else Path(env.data_dir) / "aml" / REAL_FILES.get(p.preset, "")
        if real.is_file():
            return real, "real", True
        if p.source == "real" or p.path:
            raise DataError(f"AML CSV {real} not found (dataset.path / data_dir); download it from Kaggle "
                            "'IBM Transactions for Anti Money Laundering' or set dataset.source=generated")
    out = cache_dir(env.data_dir, p.preset, p.scale, p.data_seed)
    path, hit = generate_csv(out, p.preset, p.scale, p.data_seed, p.cross_bank_rate)
    return path, "generated", hit


def split_masks(p: AmlParams, df) -> tuple[np.ndarray, ...]:
    from fgx.data.aml.splits import day_split, fraction_split

    ts = df["Timestamp"]
    if p.split == "fraction":
        return fraction_split(ts.astype("int64").to_numpy())
    day = ((ts - ts.min().normalize()).dt.days).to_numpy()
    if p.split_days is not None:
        d = p.split_days
        days = ((d[0], d[1]), (d[2], d[3]), (d[4], d[5]))
    else:
        days = get_preset(p.preset).split_days
    return day_split(day, days)


def class_weights_from(edge_y, train_mask) -> list[float]:
    """Inverse-frequency class weights of the training edges (mean 1), for class-weighted CE."""
    from fgx.tasks import class_weights
    return class_weights(edge_y[train_mask], 2).tolist()


def in_degree_histogram(data) -> list[int]:
    """For PNA's scalers: how many nodes have each in-degree."""
    import torch
    deg = torch.bincount(data.edge_index[1], minlength=data.num_nodes)
    return torch.bincount(deg).tolist()


def load(p: AmlParams, env: DataEnv, name: str, generated_only: bool) -> GraphDataset:
    from fgx.data.aml.csv_io import read_transactions
    from fgx.data.aml.features import to_graph

    path, source, hit = resolve_csv(p, env, generated_only)
    if source == "real":
        env.log.info("AML data: real CSV %s", path)
    else:
        env.log.info("AML data: generated CSV %s (%s)", path, "cache hit" if hit else "generated now")
    df = read_transactions(path)
    masks = split_masks(p, df)
    data, names = to_graph(df, masks, p.ports, p.time_deltas, p.timestamp_feature)
    outside = len(df) - sum(int(m.sum()) for m in masks)
    if outside:
        env.log.info("AML data: %d transactions fall outside the split days (in the graph, never scored)", outside)
    y = data.edge_y
    extra = {"preset": p.preset, "file": str(path), "cache_hit": hit, "split": p.split,
             "edge_features": names, "illicit_ratio": float(y.float().mean()),
             "split_edges": [int(m.sum()) for m in masks],
             "class_weights": class_weights_from(y, data.edge_train_mask),
             "in_degree_histogram": in_degree_histogram(data)}
    if source == "generated":
        extra.update(scale=p.scale, data_seed=p.data_seed)
    info = DatasetInfo(name=name, task="edge", num_classes=2, main_metric="f1_minority", source=source,
                       features_public=True, extra=extra)
    return GraphDataset(data, info)


@DATASETS.register("aml_synth", params=AmlParams, task="edge", features_public=True)   # Multi-GNN node features: constants
def load_aml_synth(p: AmlParams, env: DataEnv) -> GraphDataset:
    return load(p, env, "aml_synth", generated_only=True)


@DATASETS.register("aml", params=AmlParams, task="edge", features_public=True)
def load_aml(p: AmlParams, env: DataEnv) -> GraphDataset:
    return load(p, env, f"aml_{p.preset}", generated_only=False)
