"""What every dataset returns: one global PyG ``Data`` plus facts about its task."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from torch_geometric.data import Data


@dataclass
class DatasetInfo:
    name: str
    task: str                    # "node" | "edge" | "ranking" | "regression" | "graph"
    num_classes: int
    main_metric: str
    source: str                  # "real" | "generated"
    features_public: bool = False
    extra: dict = field(default_factory=dict)


@dataclass
class GraphDataset:
    data: "Data"
    info: DatasetInfo


@dataclass
class DataEnv:
    data_dir: Path
    seed: int
    log: logging.Logger


class DataError(ValueError):
    """A data file or generated graph that cannot be used; the message names the input."""


def load_ecosystem(name: str, folder: Path, build):
    """Run a PyG/OGB dataset constructor (``build()``, which returns the dataset object). A damaged
    raw or processed file, or a failed download, surfaces there as an error from deep inside
    numpy, pickle or torch; turn it into a DataError that names the dataset and its folder."""
    try:
        return build()
    except DataError:
        raise
    except Exception as e:  # noqa: BLE001 - any loader failure becomes one clear message
        detail = str(e).strip().splitlines()[-1][:200] if str(e).strip() else ""
        if _is_network_error(e):
            # PyG's and OGB's loaders read their raw files from <folder>/raw (processed/ is built beside it)
            raw = Path(folder) / "raw"
            raise DataError(f"dataset {name!r}: its files are not in {raw} and downloading them failed "
                            f"({type(e).__name__}: {detail}). Without network, point data_dir at a data root that "
                            f"holds them (data_dir=<data root>; docs/datasets.md lists where each dataset's files "
                            f"go), or copy them to {raw}") from e
        raise DataError(f"dataset {name!r}: could not load the files under {folder} ({type(e).__name__}: {detail}). "
                        f"If a raw file is damaged, replace it with an intact copy (or delete {folder}/raw so the "
                        f"loader downloads it again); processed/ is rebuilt from raw/ when deleted") from e


def _is_network_error(e: BaseException) -> bool:
    """A failed download (no DNS, no route, refused, timed out) anywhere in the exception's chain."""
    import socket
    import urllib.error

    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, (urllib.error.URLError, socket.gaierror, socket.timeout, ConnectionError)):
            return True
        e = e.__cause__ or e.__context__
    return False


def clients_fit(nodes_of):
    """A loader's ``check_config``: ``partitioner.num_clients`` beyond the nodes the dataset's files are
    known to hold (``nodes_of(params)``: the published count, or None) is refused before any loading.
    A graph made smaller (largest component, a split) is caught after loading, by the clients' check."""
    def check(params, validated) -> None:
        from fgx.config import ConfigError

        n = nodes_of(params)
        k = getattr(validated.params.get("partitioner"), "num_clients", None)
        if n and isinstance(k, int) and k > n:
            name = getattr(params, "dataset", None) or validated.names["dataset"]
            raise ConfigError("partitioner.num_clients", k, f"at most {n} ({name} has {n} nodes)")
    return check


def pyg_safe_globals() -> list:
    """PyG's data classes, for ``torch.load(weights_only=True)`` of a pickled ``Data`` (OGB's
    processed file, FedGB's client files): these and tensors load, anything else is refused."""
    from torch_geometric.data import Data
    from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
    from torch_geometric.data.storage import EdgeStorage, GlobalStorage, NodeStorage

    return [Data, DataEdgeAttr, DataTensorAttr, GlobalStorage, NodeStorage, EdgeStorage]


def random_split(num_items: int, train: float, val: float, seed: int) -> tuple[torch.Tensor, ...]:
    """Boolean train/val/test masks over ``num_items`` items from a seeded permutation."""
    if not (0 < train < 1 and 0 <= val < 1 and train + val < 1):
        raise DataError(f"split fractions train={train}, val={val} must be in (0, 1) with train + val < 1")
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(num_items, generator=g)
    n_tr, n_va = int(round(train * num_items)), int(round(val * num_items))
    masks = [torch.zeros(num_items, dtype=torch.bool) for _ in range(3)]
    masks[0][perm[:n_tr]] = True
    masks[1][perm[n_tr:n_tr + n_va]] = True
    masks[2][perm[n_tr + n_va:]] = True
    return tuple(masks)
