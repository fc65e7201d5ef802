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
