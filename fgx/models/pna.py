"""PNA edge classifier after Multi-GNN: PyG's PNAConv (mean/min/max/std aggregators,
identity/amplification/attenuation scalers, 5 towers) inside the Multi-GNN edge-model shell
(residual + BN, edge updates, ego IDs, ports, readout on [h_u, h_v, e])."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fgx.config import spec
from fgx.models.gine import EdgeGNN, EdgeGNNParams, edge_columns
from fgx.registry import MODELS


@dataclass
class PNAParams(EdgeGNNParams):
    hidden: int = field(default=20, metadata=spec(min=5, help="rounded down to a multiple of 5 (towers)"))
    dropout: float = field(default=0.0834, metadata=spec(min=0.0, max=1.0))
    final_dropout: float = field(default=0.2881, metadata=spec(min=0.0, max=1.0))


def degree_histogram(info) -> torch.Tensor:
    """PNA's in-degree histogram, from the dataset (global graph; computed by the loader)."""
    hist = info.extra.get("in_degree_histogram")
    if not hist:
        raise ValueError(f"model=pna needs info.extra['in_degree_histogram'] from dataset {info.name}")
    return torch.tensor(hist, dtype=torch.long)


@MODELS.register("pna", params=PNAParams, tasks=("edge",))
def build_pna(p: PNAParams, in_dim: int, out_dim: int, info) -> EdgeGNN:
    from torch_geometric.nn import PNAConv

    h = (p.hidden // 5) * 5
    deg = degree_histogram(info)

    def conv():
        return PNAConv(h, h, aggregators=["mean", "min", "max", "std"],
                       scalers=["identity", "amplification", "attenuation"], deg=deg, edge_dim=h,
                       towers=5, pre_layers=1, post_layers=1, divide_input=False)

    return EdgeGNN(p, in_dim, out_dim, edge_columns(info, p.ports), conv, h)
