"""FedGB (Ye et al., 2026; github.com/SuperYeYu/FedGB) natural-client datasets, schema 1.0.

A FedGB variant folder ``<root>/<variant>/`` holds ``fedgb_manifest.json`` (``schema_version``,
``level``, ``task``, ``num_clients``, ...) and, under ``distrib/<partition>/``, one PyG ``Data`` per
client (``data_<i>.pt``: ``x``, ``edge_index``, ``y``, ``global_map``) with its fixed split
(``<task>/default_split/{train,val,test}_<i>.pt``: boolean masks over the client's nodes). fgx reads
the homogeneous-subgraph node-classification variants (``level: homo_subgraph``, ``task:
node_cls``, e.g. AML-HI with its 29 banks, ICIJ-Hom, XS-Video): the global graph is the disjoint
union of the clients' subgraphs, each node remembers its client (``data.client``), and
``partitioner=given`` hands exactly those clients to the algorithm. ``SHA256SUMS`` files in the
variant folder (every listed file must match) or in the root (files present must match) are
verified first. Client files are read with ``torch.load(weights_only=True)`` and only PyG's data
classes allowed: a file that needs anything else is refused unread."""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from fgx.config import spec
from fgx.data.base import DataEnv, DataError, DatasetInfo, GraphDataset, pyg_safe_globals
from fgx.data.checks import check_arrays
from fgx.registry import DATASETS

SCHEMA_VERSION = "1.0"
MANIFEST = "fedgb_manifest.json"
SPLITS = ("train", "val", "test")


@dataclass
class FedGBParams:
    variant: str = field(default="", metadata=spec(help="the variant folder under root, e.g. AML-HI"))
    root: str | None = field(default=None, metadata=spec(
        help="folder holding the extracted FedGB datasets (<root>/<variant>/fedgb_manifest.json); "
             "null: <data_dir>/fedgb"))
    verify_checksums: bool = field(default=True, metadata=spec(help="check SHA256SUMS when present"))
    archive: str | None = field(default=None, metadata=spec(
        help="the release archive (FedGB-datasets-v1.0.0.tar.zst): its SHA-256 is checked against the "
             "SHA256SUMS beside it, and it is extracted into root when the variant folder is missing"))


def load_pt(path: Path):
    """A tensor or PyG Data from ``path`` without running any code from it."""
    if not path.is_file():
        raise DataError(f"{path}: missing")
    try:
        with torch.serialization.safe_globals(pyg_safe_globals()):
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - truncated, foreign or code-carrying files: refused, named
        detail = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
        raise DataError(f"{path}: not a readable FedGB tensor file ({type(e).__name__}: {detail})") from None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify_sums(sums: Path, strict: bool) -> int:
    """Check the files ``sums`` lists (``sha256sum`` format, paths relative to its folder).
    ``strict``: a listed file that is absent is an error. Returns how many files were checked."""
    try:
        lines = sums.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{sums}: unreadable ({type(e).__name__})") from None
    checked = 0
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        parts = line.strip().split(None, 1)
        if len(parts) != 2 or len(parts[0]) != 64 or any(c not in "0123456789abcdefABCDEF" for c in parts[0]):
            raise DataError(f"{sums}, line {no}: expected '<sha256>  <file>', got {line[:80]!r}")
        digest, name = parts[0].lower(), parts[1].lstrip("*").strip()
        target = (sums.parent / name).resolve()
        if sums.parent.resolve() not in target.parents:
            raise DataError(f"{sums}, line {no}: {name!r} lies outside {sums.parent}")
        if not target.is_file():
            if strict:
                raise DataError(f"{sums}, line {no}: {name} is listed but missing")
            continue
        if _sha256(target) != digest:
            raise DataError(f"{target}: SHA-256 does not match {sums} (line {no}): the file is damaged or "
                            f"was changed; download and extract it again")
        checked += 1
    return checked


def verify_archive(archive: Path) -> None:
    """The release archive against the ``SHA256SUMS`` published beside it (FedGB's checksums cover the
    archive, not the files inside it)."""
    sums = archive.parent / "SHA256SUMS"
    if not archive.is_file():
        raise DataError(f"dataset.archive: {archive} is not a file")
    if not sums.is_file():
        raise DataError(f"{sums}: missing; put FedGB's SHA256SUMS beside the archive to verify it "
                        f"(or dataset.verify_checksums=false)")
    try:
        lines = sums.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{sums}: unreadable ({type(e).__name__})") from None
    listed = {ln.split(None, 1)[1].lstrip("*").strip(): ln.split(None, 1)[0].lower()
              for ln in lines if len(ln.split(None, 1)) == 2}
    if archive.name not in listed:
        raise DataError(f"{sums}: does not list {archive.name} (it lists {sorted(listed)[:5]})")
    if _sha256(archive) != listed[archive.name]:
        raise DataError(f"{archive}: SHA-256 does not match {sums}: the download is damaged or not FedGB's "
                        f"release; download it again")


def extract_archive(archive: Path, root: Path, variant: str) -> None:
    """Extract the release into ``root`` under a lock, through a temporary folder renamed into place
    (a refused or interrupted extraction leaves nothing half-written). ``.tar.zst`` needs the
    ``zstandard`` package (``pip install -e '.[fedgb]'``; the Python here has no zstd in tarfile)."""
    import shutil
    import tarfile
    import tempfile

    from fgx.data.prepare import preparation_lock

    with preparation_lock(root / ".fedgb.lock", f"FedGB archive {archive.name}"):
        if (root / variant).is_dir():
            return
        tmp = Path(tempfile.mkdtemp(prefix=".fedgb.tmp-", dir=root))
        try:
            with open(archive, "rb") as raw:
                if archive.name.endswith(".zst"):
                    try:
                        import zstandard
                    except ImportError:
                        raise DataError(f"{archive}: a .tar.zst needs the zstandard package (pip install -e "
                                        f"'.[fedgb]'), or extract it yourself: tar --zstd -xf {archive} -C {root}"
                                        ) from None
                    stream = zstandard.ZstdDecompressor().stream_reader(raw)
                    tar = tarfile.open(fileobj=stream, mode="r|")
                else:
                    tar = tarfile.open(fileobj=raw, mode="r:*")
                with tar:
                    tar.extractall(tmp, filter="data")     # no links out, no absolute paths, no devices
            manifests = sorted(tmp.glob(f"{variant}/{MANIFEST}")) + sorted(tmp.glob(f"*/{variant}/{MANIFEST}"))
            if not manifests:
                raise DataError(f"{archive}: holds no {variant}/{MANIFEST} (dataset.variant)")
            top = manifests[0].parent.parent          # the folder holding the variants (maybe datasets/)
            for entry in top.iterdir():
                if not (root / entry.name).exists():
                    os.replace(entry, root / entry.name)
        except DataError:
            raise
        except Exception as e:  # noqa: BLE001 - truncated stream, bad tar member: one clear message
            raise DataError(f"{archive}: could not extract it ({type(e).__name__}: {str(e)[:160]})") from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def read_manifest(folder: Path) -> dict:
    path = folder / MANIFEST
    if not path.is_file():
        raise DataError(f"{path}: missing; {folder} is not a FedGB dataset folder (dataset.root/dataset.variant)")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(f"{path}: not valid JSON ({type(e).__name__}: {e})") from None
    if not isinstance(manifest, dict):
        raise DataError(f"{path}: must be a JSON object")
    version = manifest.get("schema_version")
    if version != SCHEMA_VERSION:
        raise DataError(f"{path}: schema_version {version!r}; fgx reads FedGB schema {SCHEMA_VERSION!r} only")
    if manifest.get("level") != "homo_subgraph" or manifest.get("task") != "node_cls":
        raise DataError(f"{path}: level {manifest.get('level')!r}, task {manifest.get('task')!r}; fgx reads the "
                        f"homogeneous-subgraph node-classification variants (level 'homo_subgraph', task 'node_cls')")
    n = manifest.get("num_clients")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise DataError(f"{path}: num_clients must be a positive integer, got {n!r}")
    for key in ("num_classes", "feature_dim"):
        v = manifest.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise DataError(f"{path}: {key} must be a positive integer, got {v!r}")
    return manifest


def partition_dir(folder: Path, manifest: dict) -> Path:
    distrib = folder / "distrib"
    name = manifest.get("processed_partition")
    if name:
        if not isinstance(name, str) or "/" in name or name in (".", ".."):
            raise DataError(f"{folder / MANIFEST}: processed_partition {name!r} is not a folder name")
        part = distrib / name
        if not part.is_dir():
            raise DataError(f"{part}: missing (named by processed_partition in {folder / MANIFEST})")
        return part
    found = sorted(p for p in distrib.iterdir() if p.is_dir()) if distrib.is_dir() else []
    if len(found) != 1:
        raise DataError(f"{distrib}: expected one partition folder (or processed_partition in the manifest), "
                        f"found {len(found)}")
    return found[0]


def global_map_tensor(path: Path, gm, n: int) -> torch.Tensor:
    """A client's ``global_map`` as one global id per local node, read as FedGB's own loader reads it
    (``fedgb/data/distributed_dataset_loader.py::normalize_global_map``): a tensor or list is that
    vector; a dict maps local id -> global id (FedGB's exporters write ``{local: global}``), except
    when all its values are local ids 0 … n-1, which FedGB reads as ``{global: local}``."""
    if isinstance(gm, torch.Tensor):
        return gm
    if isinstance(gm, (list, tuple)):
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in gm):
            raise DataError(f"{path}: global_map must hold integer ids, got {gm[:5]!r}")
        return torch.tensor(list(gm), dtype=torch.long)
    if not isinstance(gm, dict):
        raise DataError(f"{path}: global_map must be a tensor, a list or a dict, got {type(gm).__name__}")
    if not all(isinstance(v, int) and not isinstance(v, bool) for kv in gm.items() for v in kv):
        raise DataError(f"{path}: global_map dict must map integers to integers")
    local = set(range(n))
    if set(gm.values()) <= local and len(gm) == n and set(gm.values()) == local:     # {global: local}
        ordered = [0] * n
        for g, i in gm.items():
            ordered[i] = g
        return torch.tensor(ordered, dtype=torch.long)
    if set(gm) != local:
        raise DataError(f"{path}: global_map dict must have one entry per local node 0 … {n - 1} "
                        f"({{local: global}}), got {len(gm)} entries")
    return torch.tensor([gm[i] for i in range(n)], dtype=torch.long)


def read_client(part: Path, task: str, i: int, num_classes: int | None, feature_dim: int | None):
    path = part / f"data_{i}.pt"
    d = load_pt(path)
    from torch_geometric.data import Data

    if not isinstance(d, Data):
        raise DataError(f"{path}: expected a PyG Data object, got {type(d).__name__}")
    missing = [k for k in ("x", "edge_index", "y") if not isinstance(getattr(d, k, None), torch.Tensor)]
    if missing or getattr(d, "global_map", None) is None:
        raise DataError(f"{path}: missing field(s) {missing + ([] if getattr(d, 'global_map', None) is not None else ['global_map'])} "
                        f"(schema 1.0: tensors x, edge_index, y and a global_map)")
    x, y = d.x, d.y.reshape(-1) if d.y.dim() == 2 and d.y.size(-1) == 1 else d.y
    if x.dim() == 2 and feature_dim is not None and x.size(1) != feature_dim:
        raise DataError(f"{path}: {x.size(1)} feature columns; the manifest says feature_dim {feature_dim}")
    if y.is_floating_point() or y.dtype == torch.bool:
        raise DataError(f"{path}: y must hold integer class labels, got dtype {y.dtype}")
    n = check_arrays(str(path), x=x, edges=d.edge_index)
    if y.dim() != 1 or y.numel() != n:
        raise DataError(f"{path}: y must hold one label per node ({n}), got shape {list(d.y.shape)}")
    gm = global_map_tensor(path, d.global_map, n)
    if gm.dim() != 1 or gm.numel() != n or gm.is_floating_point() or (n and int(gm.min()) < 0):
        raise DataError(f"{path}: global_map must hold one non-negative integer id per node ({n}), "
                        f"got shape {list(gm.shape)} of dtype {gm.dtype}")
    masks = {}
    for s in SPLITS:
        mpath = part / task / "default_split" / f"{s}_{i}.pt"
        m = load_pt(mpath)
        if not isinstance(m, torch.Tensor) or m.dtype != torch.bool or m.dim() != 1 or m.numel() != n:
            what = f"shape {list(m.shape)} of dtype {m.dtype}" if isinstance(m, torch.Tensor) else type(m).__name__
            raise DataError(f"{mpath}: expected a boolean mask over the client's {n} nodes, got {what}")
        masks[s] = m
    if (masks["train"] & masks["val"]).any() or (masks["train"] & masks["test"]).any() or \
            (masks["val"] & masks["test"]).any():
        raise DataError(f"{part / task / 'default_split'}: client {i}'s train/val/test masks overlap")
    labelled = masks["train"] | masks["val"] | masks["test"]
    own = getattr(d, "num_global_classes", None)      # FedGB's exporters write it on every client
    if own is not None and (not isinstance(own, int) or isinstance(own, bool) or own < 1):
        raise DataError(f"{path}: num_global_classes must be a positive integer, got {own!r}")
    check_arrays(f"{path} (labelled nodes)", y=y[labelled], num_classes=num_classes or own)
    return x.float(), d.edge_index.long(), y.long(), gm.long(), masks, own


@DATASETS.register("fedgb", params=FedGBParams, task="node", clients="given")
def load_fedgb(p: FedGBParams, env: DataEnv) -> GraphDataset:
    from torch_geometric.data import Data

    if not p.variant:
        raise DataError("dataset.variant is empty: name a FedGB variant folder, e.g. dataset.variant=AML-HI")
    root = Path(p.root).expanduser() if p.root else Path(env.data_dir) / "fedgb"
    folder = root / p.variant
    if p.archive:
        archive = Path(p.archive).expanduser()
        if p.verify_checksums:
            verify_archive(archive)
        if not folder.is_dir():
            extract_archive(archive, root, p.variant)
    if not folder.is_dir():
        raise DataError(f"dataset.root/dataset.variant: {folder} is not a folder (extract the FedGB release under "
                        f"dataset.root; docs/datasets.md)")
    checked = 0
    if p.verify_checksums:
        if (folder / "SHA256SUMS").is_file():
            checked += verify_sums(folder / "SHA256SUMS", strict=True)
        if (root / "SHA256SUMS").is_file():
            checked += verify_sums(root / "SHA256SUMS", strict=False)
    manifest = read_manifest(folder)
    part = partition_dir(folder, manifest)
    num_classes, feature_dim = manifest.get("num_classes"), manifest.get("feature_dim")
    clients = [read_client(part, "node_cls", i, num_classes, feature_dim) for i in range(manifest["num_clients"])]
    dims = {c[0].size(1) for c in clients}
    if len(dims) != 1:
        raise DataError(f"{part}: the clients' feature dimensions differ ({sorted(dims)})")
    offsets, xs, edges, ys, owner, masks = 0, [], [], [], [], {s: [] for s in SPLITS}
    for i, (x, ei, y, _, m, _) in enumerate(clients):
        xs.append(x)
        edges.append(ei + offsets)
        ys.append(y)
        owner.append(torch.full((x.size(0),), i, dtype=torch.long))
        for s in SPLITS:
            masks[s].append(m[s])
        offsets += x.size(0)
    data = Data(x=torch.cat(xs), edge_index=torch.cat(edges, dim=1), y=torch.cat(ys), num_nodes=offsets)
    data.train_mask, data.val_mask, data.test_mask = (torch.cat(masks[s]) for s in SPLITS)
    data.client = torch.cat(owner)
    labelled = data.y[data.train_mask | data.val_mask | data.test_mask]
    if num_classes is None:     # FedGB's loader: the largest num_global_classes, else from the labels
        declared = [c[5] for c in clients if c[5] is not None]
        num_classes = max(declared) if declared else int(labelled.max()) + 1 if labelled.numel() else 1
    global_ids = torch.cat([c[3] for c in clients])
    shared = int(global_ids.numel() - torch.unique(global_ids).numel())
    info = DatasetInfo(name=f"fedgb_{p.variant}", task="node", num_classes=int(num_classes),
                       main_metric="roc_auc" if num_classes == 2 else "accuracy", source="real",
                       extra={"root": str(root), "variant": p.variant, "fedgb_name": manifest.get("name"),
                              "schema_version": SCHEMA_VERSION, "num_clients": manifest["num_clients"],
                              "partition": part.name, "nodes_in_several_clients": shared,
                              "checksums_verified": checked})
    env.log.info("FedGB %s: %d clients, %d nodes, %d classes (%d files checked against SHA256SUMS)",
                 p.variant, manifest["num_clients"], offsets, num_classes, checked)
    return GraphDataset(data, info)


def _check_config(params: FedGBParams, validated) -> None:
    from fgx.config import ConfigError

    if not params.variant:
        raise ConfigError("dataset.variant", params.variant, "a FedGB variant folder name, e.g. AML-HI")


load_fedgb.check_config = _check_config
