"""`fgx data generate PRESET ...` writes a generated AMLworld-format CSV; `fgx data stats DATASET ...`
prints Table-3-style statistics of an AML dataset (a conf/dataset name with overrides, or a CSV)."""
from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("data", help="AML data tools: generate a preset's CSV, print dataset statistics")
    tools = p.add_subparsers(dest="data_tool", metavar="TOOL")
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])

    g = tools.add_parser("generate", help="write an AMLworld-format CSV (Kaggle schema) for a preset")
    g.add_argument("preset", help="tiny, hi_small, li_small, hi_medium, li_medium, hi_large, li_large "
                                  "(an aml_ prefix is accepted)")
    g.add_argument("--scale", type=float, default=1.0, help="multiplies accounts and transactions")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--out", type=Path, required=True, help="output folder (Trans.csv, Patterns.csv)")
    g.add_argument("--cross-bank-rate", type=float, default=None)
    g.set_defaults(func=generate)

    s = tools.add_parser("stats", help="Table-3-style statistics: nodes, edges, clients, L/S, illicit ratio, "
                                       "share crossing banks, laundering patterns per typology (fgx's Patterns.csv "
                                       "or AMLworld's <name>_Patterns.txt beside the CSV)")
    s.add_argument("dataset", help="a conf/dataset name (aml_tiny, aml_hi_small, ...) or a path to a CSV")
    s.add_argument("overrides", nargs="*", help="dataset.KEY=VALUE / partitioner.KEY=VALUE overrides")
    s.add_argument("--clients", type=int, default=None, help="by_bank clients (default: the paper's for the preset)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=stats)


def generate(args) -> int:
    from fgx.data.aml.cache import generate_csv
    from fgx.data.aml.presets import get_preset

    try:
        get_preset(args.preset)
    except KeyError as e:
        print(f"fgx data generate: {e.args[0]}", file=sys.stderr)
        return 2
    if args.scale <= 0:
        print("fgx data generate: --scale must be > 0", file=sys.stderr)
        return 2
    t = time.perf_counter()
    path, hit = generate_csv(args.out, args.preset, args.scale, args.seed, args.cross_bank_rate)
    what = "already there (same preset, scale and seed)" if hit else f"written in {time.perf_counter() - t:.1f}s"
    print(f"{path}: {what}")
    return 0


def _load(args):
    from omegaconf import OmegaConf

    from fgx.cli import compose
    from fgx.config import ConfigError, default_data_dir, validate
    from fgx.data.base import DataEnv
    from fgx.registry import DATASETS

    log = logging.getLogger("fgx.data")
    if args.dataset.endswith(".csv"):
        overrides = ["dataset=aml_hi_small", f"dataset.path={args.dataset}", "dataset.source=real"]
    else:
        overrides = [f"dataset={args.dataset}"]
    name = OmegaConf.select(compose(overrides), "dataset.name")
    if name not in ("aml", "aml_synth"):
        raise SystemExit(f"fgx data stats: {args.dataset} is dataset '{name}', not an AML dataset")
    cfg = compose(overrides + ["partitioner=by_bank", "model=gine", "algorithm=fedavg"] + list(args.overrides))
    try:
        v = validate(cfg)
    except ConfigError as e:
        raise SystemExit(f"fgx data stats: {e}") from None
    name = v.names["dataset"]
    data_dir = Path(OmegaConf.select(cfg, "data_dir") or default_data_dir()).expanduser()
    ds = DATASETS.get(name).obj(v.params["dataset"], DataEnv(data_dir, v.top.seed, log))
    return ds, v


def table3_stats(ds, num_clients: int) -> dict:
    import torch

    from fgx.data.aml.patterns import pattern_stats
    from fgx.partition.base import build_clients, partition_stats
    from fgx.partition.by_bank import ByBankParams, by_bank

    d, info = ds.data, ds.info
    parts = by_bank(ByBankParams(num_clients=num_clients), d, info, 0)
    pstats = partition_stats(d, info, build_clients(d, info, parts))
    y = d.edge_y.bool()
    bank_src, bank_dst = d.node_bank[d.edge_index[0]], d.node_bank[d.edge_index[1]]
    out = {
        "dataset": info.name, "source": info.source, "file": info.extra.get("file"),
        "edges": int(d.edge_index.size(1)), "nodes": int(d.num_nodes),
        "banks": int(torch.unique(d.node_bank).numel()), "clients": num_clients,
        "ls_ratio": round(pstats["ls_ratio"], 3), "cross_client_edges": pstats["cross_client_edges"],
        "laundering_edges": int(y.sum()),
        "illicit_ratio": f"1/{(1 / max(float(y.float().mean()), 1e-12)):.0f}",
        "share_crossing_banks": {"all": round(float((bank_src != bank_dst).float().mean()), 4),
                                 "laundering": round(float((bank_src != bank_dst)[y].float().mean()), 4)
                                 if y.any() else None},
        "split_edges": info.extra.get("split_edges"),
    }
    pat = pattern_stats(Path(info.extra["file"]), out["laundering_edges"]) if info.extra.get("file") else None
    if pat is not None:
        out["patterns"] = pat
    return out


def _rows(name: str, val) -> list[tuple[str, str]]:
    """Table rows of a statistic: nested dicts flattened to ``a: b`` names; a dict of numbers only
    (one typology's counts) on one line."""
    if not isinstance(val, dict):
        return [(name, str(val))]
    if val and not any(isinstance(v, dict) for v in val.values()) and name.count(":") >= 2:
        return [(name, ", ".join(f"{a} {b}" for a, b in val.items()))]
    return [row for kk, vv in val.items() for row in _rows(f"{name}: {kk}", vv)]


def stats(args) -> int:
    from fgx.data.aml.presets import get_preset

    ds, v = _load(args)
    clients = args.clients or get_preset(v.params["dataset"].preset).num_clients
    s = table3_stats(ds, clients)
    if args.dataset.endswith(".csv"):
        s["dataset"] = Path(args.dataset).name
    if args.json:
        try:
            print(json.dumps(s, indent=2))
        except BrokenPipeError:      # `| head`
            pass
        return 0
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{s['dataset']} ({s['source']}: {s['file']})")
    t.add_column("statistic")
    t.add_column("value", justify="right")
    for k, val in s.items():
        if k in ("dataset", "source", "file"):
            continue
        for name, text in _rows(k, val):
            t.add_row(name, text)
    Console().print(t)
    return 0
