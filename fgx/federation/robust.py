"""The server's rule over the round's updates (the ``aggregator`` config group, docs/threats.md):
``mean`` (the weighted average every algorithm used before, bit for bit) and the Byzantine-robust rules.

FedAvg's aggregate phase (fgx/algorithms/fedavg.py) calls ``ctx.aggregator(deltas, weights)`` where it
averaged. Robust rules see each update as one flat vector of its floating tensors and treat clients
alike (the weights are the honest clients' claim, which a malicious client could inflate); ``pre``
transforms the vectors first (``clip``: norm clipping; ``nnm``: nearest-neighbour mixing)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fgx.config import ConfigError, spec
from fgx.registry import AGGREGATORS

State = dict[str, torch.Tensor]


@dataclass
class AggregatorParams:
    pre: str = field(default="none", metadata=spec(choices=["none", "nnm", "clip"], help=(
        "pre-aggregation: nnm (each update replaced by the mean of its n - f nearest updates, Allouah et al. "
        "2023) | clip (each update scaled to L2 norm <= clip_norm) | none")))
    byzantine_fraction: float = field(default=0.2, metadata=spec(min=0.0, max=0.5, help=(
        "f / n the rule is built to tolerate: f = floor(byzantine_fraction * clients in the round)")))
    clip_norm: float = field(default=1.0, metadata=spec(gt=0.0, help="pre=clip: the L2 bound of each update"))


def flatten(states: list[State]) -> tuple[torch.Tensor, list[str]]:
    """[n, d] the floating tensors of each update, concatenated in key order (the keys returned)."""
    keys = [k for k in states[0] if states[0][k].is_floating_point()]
    return torch.stack([torch.cat([s[k].reshape(-1) for k in keys]) for s in states]), keys


def unflatten(vec: torch.Tensor, keys: list[str], like: State) -> State:
    """A state shaped like ``like`` from a flat vector (``like``'s integer buffers as they are)."""
    out, start = {}, 0
    for k, v in like.items():
        if k in keys:
            out[k] = vec[start:start + v.numel()].view_as(v).to(v.dtype)
            start += v.numel()
        else:
            out[k] = v.clone()
    return out


def byzantine_count(n: int, fraction: float) -> int:
    return int(fraction * n)


class Aggregator:
    name = "mean"
    # the reason, where this rule needs each client's update in clear (secure aggregation refuses it)
    needs_individual_updates: str | None = None

    def __init__(self, params: AggregatorParams):
        self.params = params

    @property
    def neutral(self) -> bool:
        """True where it computes exactly the weighted average (the rule every run used before)."""
        return False

    @classmethod
    def individual_updates_reason(cls, params) -> str | None:
        """Why this configuration needs each client's update in clear (None: the sum is enough)."""
        if cls.needs_individual_updates:
            return cls.needs_individual_updates
        if params.pre != "none":
            return f"pre-aggregation {params.pre} transforms each client's update on the server"
        return None

    def __call__(self, deltas: list[State], weights: list[float]) -> State:
        vecs, keys = flatten(deltas)
        f = byzantine_count(len(deltas), self.params.byzantine_fraction)
        vecs = pre_aggregate(self.params, vecs, f)
        return unflatten(self.rule(vecs, torch.as_tensor(weights, dtype=vecs.dtype), f), keys, deltas[0])

    def rule(self, vecs: torch.Tensor, weights: torch.Tensor, f: int) -> torch.Tensor:
        raise NotImplementedError

    @classmethod
    def check_config(cls, params, validated) -> None:
        """Refuse a rule other than the plain average where it would be ignored (an algorithm whose
        aggregate phase does not call it) or where it would break a privacy mechanism's calibration."""
        if cls.name == "mean" and params.pre == "none":
            return
        from fgx.algorithms.base import calls_threat_hooks

        what = f"aggregator '{validated.names['aggregator']}'" + (f" with pre={params.pre}" if params.pre != "none" else "")
        if not calls_threat_hooks(validated.entries["algorithm"].obj):
            raise ConfigError("aggregator.name", validated.names["aggregator"], (
                f"'mean' with pre=none for algorithm '{validated.names['algorithm']}': its aggregate phase does not "
                f"call the aggregator, so {what} would be ignored; FedAvg and the algorithms that keep its "
                f"aggregate phase call it"))
        if validated.names["privacy"] != "none":
            raise ConfigError("aggregator.name", validated.names["aggregator"], (
                f"'mean' with pre=none under privacy '{validated.names['privacy']}': its noise is calibrated to "
                f"the sensitivity of the average, not of {what}"))


def pre_aggregate(params: AggregatorParams, vecs: torch.Tensor, f: int) -> torch.Tensor:
    if params.pre == "clip":
        return clip_norms(vecs, params.clip_norm)
    if params.pre == "nnm":
        return nearest_neighbour_mixing(vecs, f)
    return vecs


def clip_norms(vecs: torch.Tensor, c: float) -> torch.Tensor:
    """Each row scaled to L2 norm at most c (norm bounding, Sun et al. 2019)."""
    norms = vecs.norm(dim=1, keepdim=True)
    return vecs * torch.clamp(c / norms.clamp(min=1e-12), max=1.0)


def nearest_neighbour_mixing(vecs: torch.Tensor, f: int) -> torch.Tensor:
    """NNM (Allouah et al. 2023): each vector replaced by the mean of its n - f nearest vectors (itself
    included), in Euclidean distance."""
    n = vecs.size(0)
    dist = torch.cdist(vecs, vecs)
    near = dist.topk(n - f, dim=1, largest=False).indices
    return vecs[near].mean(dim=1)


@dataclass
class MeanParams(AggregatorParams):
    pass


@AGGREGATORS.register("mean", params=MeanParams)
class Mean(Aggregator):
    """The weighted average (by the algorithm's weighting), after ``pre`` where one is set."""
    name = "mean"

    @property
    def neutral(self) -> bool:
        return self.params.pre == "none"

    def __call__(self, deltas: list[State], weights: list[float]) -> State:
        if self.neutral:
            from fgx.algorithms.base import weighted_average

            return weighted_average(deltas, weights)
        return super().__call__(deltas, weights)

    def rule(self, vecs: torch.Tensor, weights: torch.Tensor, f: int) -> torch.Tensor:
        return (weights[:, None] * vecs).sum(0) / weights.sum()
