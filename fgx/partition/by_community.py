"""One client per generated community (``data.community``), e.g. the hetero_homophily generator's."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from fgx.data.base import DataError
from fgx.registry import PARTITIONERS


@dataclass
class ByCommunityParams:
    pass


@PARTITIONERS.register("by_community", params=ByCommunityParams, tasks=("node",), needs=("community",))
def by_community(p: ByCommunityParams, data, info, seed: int) -> list[torch.Tensor]:
    comm = getattr(data, "community", None)
    if comm is None:
        raise DataError(f"partitioner 'by_community' needs a dataset with node communities "
                        f"(data.community), e.g. dataset=hetero_homophily; '{info.name}' has none")
    return [(comm == k).nonzero().view(-1) for k in range(int(comm.max()) + 1)]
