"""Tables that are pure arithmetic: a preset whose YAML holds an ``accounting:`` block names its kind
(``accounting.kind``), one registered function per kind in this package (``metric_dp``: CE-FedGNN
Tables 6/7; ``pndp``: Bellet et al. Fig. 2). Adding a kind is a file here that registers itself."""
from __future__ import annotations

from pathlib import Path

from fgx.registry import Registry
from fgx.tables.errors import TablesError

ACCOUNTING = Registry("accounting", "fgx.tables.accounting")


def run_accounting(name: str, t: dict, out_dir: Path):
    kind = t["accounting"].get("kind")
    if not isinstance(kind, str) or kind not in ACCOUNTING:
        raise TablesError(f"conf/experiment/{name}.yaml: accounting.kind={kind!r}; fgx knows {ACCOUNTING.names()}")
    return ACCOUNTING.get(kind).obj(name, t, out_dir)
