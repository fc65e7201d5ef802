"""A partition read from a file: the client of every node, written by fgx, another tool or by hand.

It lets two tools train on the very same clients (scripts/bench_peers.py writes one partition and
hands it to fgx and OpenFGL) and lets a researcher reuse a published split. The file holds one
integer per node, in node order: the owning client (0 .. K-1), or -1 for a node no client owns.

    .pt    a 1-D integer tensor (torch.save), or a dict whose "client" entry is one (other entries,
           e.g. the split masks scripts/bench_peers.py adds for the peer, are ignored); weights_only=True
    .npy   a 1-D integer array (numpy.save), loaded without pickles
    .json  a list of integers, or {"client": [...]}
    .txt   one integer per line"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from fgx.config import ConfigError, spec
from fgx.data.base import DataError
from fgx.registry import PARTITIONERS

FORMATS = (".pt", ".npy", ".json", ".txt")


@dataclass
class FileParams:
    path: str = field(default="", metadata=spec(help="file with the client of every node (.pt, .npy, .json, .txt)"))
    num_clients: int | None = field(default=None, metadata=spec(
        min=1, help="if set: the file must name exactly this many clients"))

    def validate(self, prefix: str) -> None:
        if not self.path:
            raise ConfigError(f"{prefix}.path", self.path, "the path of a partition file (one client id per node)")
        p = Path(self.path).expanduser()
        if p.suffix not in FORMATS:
            raise ConfigError(f"{prefix}.path", self.path, f"a file ending in one of {list(FORMATS)}")
        if not p.is_file():
            raise ConfigError(f"{prefix}.path", self.path, "an existing partition file")


def read_assignment(path: Path) -> torch.Tensor:
    """The file's client ids as a 1-D long tensor (DataError naming the file when it cannot be read)."""
    try:
        if path.suffix == ".pt":
            raw = torch.load(path, map_location="cpu", weights_only=True)
            raw = raw.get("client") if isinstance(raw, dict) else raw
        elif path.suffix == ".npy":
            import numpy as np
            raw = np.load(path, allow_pickle=False)
        elif path.suffix == ".json":
            raw = json.loads(path.read_text())
            raw = raw.get("client") if isinstance(raw, dict) else raw
        else:
            raw = [int(line) for line in path.read_text().split()]
        t = torch.as_tensor(raw)
    except Exception as e:  # noqa: BLE001 - any reader error means the same thing: unusable file
        raise DataError(f"partition file {path}: cannot read one client id per node ({type(e).__name__}: "
                        f"{str(e)[:200]})") from None
    if t.dim() != 1 or t.is_floating_point() or t.dtype == torch.bool:
        raise DataError(f"partition file {path}: expected a flat list of integer client ids, got "
                        f"{t.dtype} of shape {tuple(t.shape)}")
    return t.long()


@PARTITIONERS.register("file", params=FileParams, tasks=("node", "edge", "graph", "link"))
def file_partition(p: FileParams, data, info, seed: int) -> list[torch.Tensor]:
    path = Path(p.path).expanduser()
    owner = read_assignment(path)
    if owner.numel() != data.num_nodes:
        raise DataError(f"partition file {path}: {owner.numel()} entries, but dataset {info.name} has "
                        f"{data.num_nodes} nodes (one client id per node, -1 for none)")
    if bool((owner < -1).any()):
        raise DataError(f"partition file {path}: client ids must be >= 0 (or -1 for an unowned node), "
                        f"found {int(owner.min())}")
    k = int(owner.max()) + 1
    if k == 0:
        raise DataError(f"partition file {path}: no node is assigned to a client")
    sizes = torch.bincount(owner[owner >= 0], minlength=k)
    empty = (sizes == 0).nonzero().view(-1).tolist()
    if empty:
        raise DataError(f"partition file {path}: clients {empty[:10]} own no nodes (ids must be 0 .. K-1, each used)")
    if p.num_clients is not None and k != p.num_clients:
        raise DataError(f"partition file {path} names {k} clients, but partitioner.num_clients={p.num_clients}")
    order = torch.argsort(owner, stable=True)
    owned = order[owner[order] >= 0]
    return list(torch.split(owned, sizes.tolist()))
