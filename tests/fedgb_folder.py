"""Builds a small FedGB schema-1.0 variant folder (the layout of github.com/SuperYeYu/FedGB's
release, homogeneous-subgraph node classification) for the tests."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch


def make_fedgb(root: Path, variant: str = "TOY", num_clients: int = 3, nodes: int = 40, features: int = 6,
               classes: int = 3, seed: int = 0, sums: bool = True, partition: str = "natural") -> Path:
    """``root/variant`` with a manifest, ``num_clients`` clients of ``nodes`` nodes each (a ring plus
    random chords, labels that depend on the features) and 50/25/25 fixed splits."""
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(seed)
    folder = Path(root) / variant
    part = folder / "distrib" / partition
    split_dir = part / "node_cls" / "default_split"
    split_dir.mkdir(parents=True, exist_ok=True)
    centers = torch.randn(classes, features, generator=g) * 2
    start = 0
    for i in range(num_clients):
        y = torch.randint(0, classes, (nodes,), generator=g)
        x = centers[y] + torch.randn(nodes, features, generator=g)
        ring = torch.arange(nodes)
        src = torch.cat([ring, torch.randint(0, nodes, (nodes,), generator=g)])
        dst = torch.cat([(ring + 1) % nodes, torch.randint(0, nodes, (nodes,), generator=g)])
        keep = src != dst
        ei = torch.stack([src[keep], dst[keep]])
        ei = torch.cat([ei, ei.flip(0)], dim=1)
        data = Data(x=x, edge_index=ei, y=y, global_map=torch.arange(start, start + nodes))
        start += nodes
        torch.save(data, part / f"data_{i}.pt")
        perm = torch.randperm(nodes, generator=g)
        cut = [0, nodes // 2, (3 * nodes) // 4, nodes]
        for s, (a, b) in zip(("train", "val", "test"), zip(cut, cut[1:])):
            m = torch.zeros(nodes, dtype=torch.bool)
            m[perm[a:b]] = True
            torch.save(m, split_dir / f"{s}_{i}.pt")
    manifest = {"name": variant, "source_group": variant, "level": "homo_subgraph", "task": "node_cls",
                "num_clients": num_clients, "dataset_id": "ACM", "feature_dim": features, "num_classes": classes,
                "schema_version": "1.0", "processed_partition": partition}
    (folder / "fedgb_manifest.json").write_text(json.dumps(manifest, indent=1))
    if sums:
        write_sums(folder)
    return folder


def write_sums(folder: Path) -> None:
    lines = []
    for f in sorted(p for p in Path(folder).rglob("*") if p.is_file() and p.name != "SHA256SUMS"):
        lines.append(f"{hashlib.sha256(f.read_bytes()).hexdigest()}  {f.relative_to(folder).as_posix()}")
    (Path(folder) / "SHA256SUMS").write_text("\n".join(lines) + "\n")


def make_fedgb_export(root: Path, variant: str = "EICU-Hom", hospitals: tuple[int, ...] = (73, 141, 264),
                      stays_per_client: int = 30, features: int = 5, seed: int = 0) -> Path:
    """A homogeneous variant written as FedGB's exporter writes one
    (SuperYeYu/FedGB ``scripts/prepare_data/eicu/export_fedgb.py``, ``hom`` branch), not as fgx would:
    the manifest carries no ``feature_dim``/``num_classes`` but ``split`` and a ``processed_partition``
    named ``subgraph_fl_louvain_1_ACM_client_<N>``; each ``data_<i>.pt`` is a PyG ``Data`` whose
    ``global_map`` is a Python dict ``{local id: global stay id}``, with ``num_global_classes``,
    ``hospitalid`` and ``client_name``; edges come from a projection (both directions); the fixed
    splits sit beside ``glb_<split>_<i>.pkl`` lists of global ids; plus ``description.txt``,
    ``metadata/manifest.json`` and the global graph under ``global/``."""
    import pickle

    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(seed)
    n_clients = len(hospitals)
    folder = Path(root) / variant
    partition = f"subgraph_fl_louvain_1_ACM_client_{n_clients}"
    part = folder / "distrib" / partition
    split_root = part / "node_cls" / "default_split"
    split_root.mkdir(parents=True, exist_ok=True)
    total = stays_per_client * n_clients
    labels = torch.randint(0, 3, (total,), generator=g)
    feats = torch.randn(3, features, generator=g)[labels] + torch.randn(total, features, generator=g)
    names = ("train", "val", "test")
    split_of = [names[k] for k in torch.randint(0, 3, (total,), generator=g).tolist()]
    stay_ids = torch.randperm(total, generator=g).view(n_clients, stays_per_client)
    for client_id, hospital in enumerate(hospitals):
        ids = sorted(stay_ids[client_id].tolist())
        t = torch.tensor(ids)
        a = torch.randint(0, len(ids), (2 * len(ids),), generator=g)
        b = torch.randint(0, len(ids), (2 * len(ids),), generator=g)
        keep = a != b
        ei = torch.unique(torch.cat([torch.stack([a[keep], b[keep]]), torch.stack([b[keep], a[keep]])], 1), dim=1)
        data = Data(x=feats[t], edge_index=ei, y=labels[t])
        data.global_map = {index: int(stay) for index, stay in enumerate(ids)}
        data.num_global_classes = 3
        data.hospitalid = int(hospital)
        data.client_name = f"client_{hospital}"
        torch.save(data, part / f"data_{client_id}.pt")
        masks = {s: torch.zeros(len(ids), dtype=torch.bool) for s in names}
        glb = {s: [] for s in names}
        for local, stay in enumerate(ids):
            masks[split_of[stay]][local] = True
            glb[split_of[stay]].append(stay)
        for s in names:
            torch.save(masks[s], split_root / f"{s}_{client_id}.pt")
            with (split_root / f"glb_{s}_{client_id}.pkl").open("wb") as f:
                pickle.dump(glb[s], f)
    manifest = {"dataset_id": "ACM", "level": "homo_subgraph", "name": variant, "num_clients": n_clients,
                "processed_partition": partition, "schema_version": "1.0", "source_group": "EICU",
                "split": "node_cls/default_split", "task": "node_cls"}
    (folder / "fedgb_manifest.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    glob = Data(x=feats.clone(), edge_index=torch.empty((2, 0), dtype=torch.long), y=labels.clone())
    glob.global_map = {i: i for i in range(total)}
    glob.num_global_classes = 3
    (folder / "global" / "subgraph_fl" / "acm" / "processed").mkdir(parents=True)
    torch.save(glob, folder / "global" / "subgraph_fl" / "acm" / "processed" / "data.pt")
    (folder / "metadata").mkdir()
    (folder / "metadata" / "manifest.json").write_text(json.dumps({"schema_version": "eicu2-fedgb-1.0",
                                                                   "num_classes": 3}, indent=2))
    (part / "description.txt").write_text(json.dumps({"task": "node_cls", "num_clients": n_clients}, indent=2))
    return folder


def release_archive(root: Path, out: Path, name: str = "FedGB-datasets-v1.0.0.tar.zst") -> Path:
    """The variants under ``root`` packed as FedGB publishes them: one ``.tar.zst`` under a
    ``datasets/`` folder, and a ``SHA256SUMS`` beside it that lists the archive only."""
    import io
    import tarfile

    import zstandard

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for variant in sorted(Path(root).iterdir()):
            tar.add(variant, arcname=f"datasets/{variant.name}")
    out.mkdir(parents=True, exist_ok=True)
    archive = out / name
    archive.write_bytes(zstandard.ZstdCompressor().compress(buf.getvalue()))
    (out / "SHA256SUMS").write_text(f"{hashlib.sha256(archive.read_bytes()).hexdigest()}  {name}\n")
    return archive
