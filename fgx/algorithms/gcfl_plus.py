"""GCFL+ (Xie et al., NeurIPS 2021): GCFL whose split looks at how the clients' updates evolve. Each
client's norm of its update to the shared layers is kept as a sequence over rounds; when a cluster
meets GCFL's split condition (small mean update, a large client update, more than two clients,
after the warm-up) and every client has at least ``seq_length`` norms, the cluster is cut in two at
the minimum cut of max(D) - D, where D holds the dynamic-time-warping distances (dtaidistance, as the
authors' code) between the members' last ``seq_length`` norms; every sequence then starts again
(Oxfordblue7/GCFL, training.py ``run_gcflplus`` and server.py)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from fgx.algorithms.gcfl import GCFL, GCFLParams, min_cut
from fgx.config import spec
from fgx.registry import ALGORITHMS


@dataclass
class GCFLPlusParams(GCFLParams):
    seq_length: int = field(default=5, metadata=spec(min=1, help="norms per client the DTW compares (authors: 5)"))
    standardize: bool = field(default=False, metadata=spec(
        help="divide each sequence by its standard deviation first (compare trends only; authors' default: off)"))


def dtw_distances(seqs: list[list[float]], standardize: bool) -> np.ndarray:
    """Pairwise DTW distances between equally long sequences (the authors' ``compute_pairwise_distances``)."""
    from dtaidistance import dtw

    s = np.asarray(seqs, dtype=np.double)
    if standardize:
        s = s / np.maximum(s.std(axis=1, keepdims=True), 1e-12)
    return np.asarray(dtw.distance_matrix(s))


@ALGORITHMS.register("gcfl_plus", params=GCFLPlusParams, tasks=("node", "edge", "graph"))
class GCFLPlus(GCFL):
    needs_individual_updates = ("GCFL+ splits a cluster on the DTW distances of its clients' sequences of "
                                "individual update norms")

    def setup(self) -> None:
        super().setup()
        self.seqs: dict[int, list[float]] = {s.cid: [] for s in self.states}

    def observe(self, received: list, r: int) -> None:
        from fgx.algorithms.gcfl import flatten

        for members, deltas in received:
            for s, d in zip(members, deltas):
                self.seqs[s.cid].append(float(flatten(d).norm()))

    def bipartition(self, members: list, flat: torch.Tensor):
        L = self.params.seq_length
        if any(len(v) < L for v in self.seqs.values()):
            return None
        D = dtw_distances([self.seqs[s.cid][-L:] for s in members], self.params.standardize)
        self.ctx.record("gcfl_plus_dtw", {"members": [s.cid for s in members], "distances": D.round(6).tolist()})
        cut = min_cut(torch.from_numpy(D.max() - D))
        self.seqs = {cid: [] for cid in self.seqs}
        return cut

    def state_dict(self) -> dict:
        return {**super().state_dict(), "seqs": [[cid, list(v)] for cid, v in self.seqs.items()]}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.seqs = {int(cid): list(v) for cid, v in state["seqs"]}
