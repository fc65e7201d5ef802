"""The server's rule over the round's updates (the ``aggregator`` config group, docs/threats.md):
``mean`` (the weighted average every algorithm used before, bit for bit) and the Byzantine-robust rules.

The plain-averaging aggregate phase (fgx/algorithms/) calls ``ctx.aggregator(deltas, weights)`` where it
averaged. Robust rules see each update as one flat vector of its floating tensors and treat clients
alike (the weights are the honest clients' claim, which a malicious client could inflate); ``pre``
transforms the vectors first (``clip``: norm clipping; ``nnm``: nearest-neighbour mixing).

The rules follow ByzFL's definitions (Allouah et al. 2023; byzfl.aggregators) and tests/test_robust_aggregators.py
checks each against ByzFL on random inputs. They are written here in torch rather than called from ByzFL
because the defining step of each must be in this repository for the mutation tests to break it
(scripts/known_mutations.py), and so that a robust run needs no optional package."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fgx.config import ConfigError, spec
from fgx.registry import AGGREGATORS

State = dict[str, torch.Tensor]



def weighted_average(states: list[dict[str, torch.Tensor]], weights: list[float]) -> dict[str, torch.Tensor]:
    total = float(sum(weights))
    out = {}
    for k in states[0]:
        if not states[0][k].is_floating_point():
            out[k] = states[0][k].clone()   # integer buffers (e.g. BN's num_batches_tracked)
            continue
        out[k] = sum(s[k] * (w / total) for s, w in zip(states, weights))
    return out

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

    def state_dict(self) -> dict:
        """What a rule carries from round to round (centered clipping's centre); {} for the others."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass

    @classmethod
    def check_config(cls, params, validated) -> None:
        """Refuse a rule other than the plain average where it would be ignored (an algorithm whose
        aggregate phase does not call it) or where it would break a privacy mechanism's calibration."""
        if cls.name == "mean" and params.pre == "none":
            return
        what = f"aggregator '{validated.names['aggregator']}'" + (f" with pre={params.pre}" if params.pre != "none" else "")
        if not validated.entries["algorithm"].obj.calls_threat_hooks():
            raise ConfigError("aggregator.name", validated.names["aggregator"], (
                f"'mean' with pre=none for algorithm '{validated.names['algorithm']}': its aggregate phase does not "
                f"call the aggregator, so {what} would be ignored; the plain-averaging round and the algorithms that "
                f"keep its aggregate phase call it"))
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
            return weighted_average(deltas, weights)
        return super().__call__(deltas, weights)

    def rule(self, vecs: torch.Tensor, weights: torch.Tensor, f: int) -> torch.Tensor:
        return (weights[:, None] * vecs).sum(0) / weights.sum()


# -- the robust rules (Byzantine-robust aggregation). Each treats clients alike and needs each update. ----------

INDIVIDUAL = "a robust rule compares the clients' individual updates"


@dataclass
class RobustParams(AggregatorParams):
    pass


def _check_f(name: str, n: int, f: int, need: int) -> None:
    if n < need:
        raise ValueError(f"aggregator {name}: {n} updates in the round cannot tolerate f = {f} (needs n >= {need})")


@AGGREGATORS.register("median", params=RobustParams)
class Median(Aggregator):
    """Coordinate-wise median (Yin et al. 2018); the mean of the two middle values for an even count."""
    name = "median"
    needs_individual_updates = INDIVIDUAL

    def rule(self, vecs, weights, f):
        return coordinate_median(vecs)


def coordinate_median(vecs: torch.Tensor) -> torch.Tensor:
    s = vecs.sort(dim=0).values
    n = s.size(0)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


@AGGREGATORS.register("trimmed_mean", params=RobustParams)
class TrimmedMean(Aggregator):
    """Coordinate-wise trimmed mean (Yin et al. 2018): the f largest and f smallest values of each
    coordinate dropped, the rest averaged."""
    name = "trimmed_mean"
    needs_individual_updates = INDIVIDUAL

    def rule(self, vecs, weights, f):
        n = vecs.size(0)
        _check_f(self.name, n, f, 2 * f + 1)
        return vecs.sort(dim=0).values[f:n - f].mean(0)


def krum_scores(vecs: torch.Tensor, f: int) -> torch.Tensor:
    """Each vector's mean squared distance to its n - f - 1 nearest others (ByzFL's Krum score; Blanchard
    et al. 2017 sum over n - f - 2: the same order up to that one neighbour)."""
    n = vecs.size(0)
    d2 = torch.cdist(vecs, vecs).pow(2)
    return d2.sort(dim=1).values[:, 1:n - f].mean(1)


@AGGREGATORS.register("krum", params=RobustParams)
class Krum(Aggregator):
    """Krum (Blanchard et al. 2017): the one update with the smallest Krum score."""
    name = "krum"
    needs_individual_updates = INDIVIDUAL

    def rule(self, vecs, weights, f):
        _check_f(self.name, vecs.size(0), f, 2 * f + 1)
        return vecs[krum_scores(vecs, f).argmin()]


@AGGREGATORS.register("multi_krum", params=RobustParams)
class MultiKrum(Aggregator):
    """Multi-Krum: the mean of the n - f updates with the smallest Krum scores."""
    name = "multi_krum"
    needs_individual_updates = INDIVIDUAL

    def rule(self, vecs, weights, f):
        n = vecs.size(0)
        _check_f(self.name, n, f, 2 * f + 1)
        return vecs[krum_scores(vecs, f).topk(n - f, largest=False).indices].mean(0)


@dataclass
class GeometricMedianParams(AggregatorParams):
    nu: float = field(default=0.1, metadata=spec(gt=0.0, help="smoothing: distances below nu count as nu"))
    iterations: int = field(default=3, metadata=spec(min=1, help="smoothed Weiszfeld iterations from 0 (RFA uses 3)"))


@AGGREGATORS.register("geometric_median", params=GeometricMedianParams)
class GeometricMedian(Aggregator):
    """RFA (Pillutla et al. 2022): the geometric median by the smoothed Weiszfeld algorithm, ``iterations``
    steps from the origin, each a mean weighted by 1 / max(nu, distance to the current estimate)."""
    name = "geometric_median"
    needs_individual_updates = INDIVIDUAL

    def rule(self, vecs, weights, f):
        z = torch.zeros_like(vecs[0])
        for _ in range(self.params.iterations):
            beta = 1.0 / (vecs - z).norm(dim=1).clamp(min=self.params.nu)
            z = (beta[:, None] * vecs).sum(0) / beta.sum()
        return z


@dataclass
class CenteredClippingParams(AggregatorParams):
    tau: float = field(default=10.0, metadata=spec(gt=0.0, help="clipping radius around the centre"))
    iterations: int = field(default=1, metadata=spec(min=1, help="clipping steps per round (L)"))


@AGGREGATORS.register("centered_clipping", params=CenteredClippingParams)
class CenteredClipping(Aggregator):
    """Centered clipping (Karimireddy et al. 2021): from the previous round's aggregate v (0 at first),
    ``iterations`` times v <- v + mean_i clip_tau(x_i - v)."""
    name = "centered_clipping"
    needs_individual_updates = INDIVIDUAL

    def __init__(self, params):
        super().__init__(params)
        self.centre: torch.Tensor | None = None

    def rule(self, vecs, weights, f):
        v = torch.zeros_like(vecs[0]) if self.centre is None or self.centre.shape != vecs[0].shape else \
            self.centre.to(vecs)
        for _ in range(self.params.iterations):
            v = v + clip_norms(vecs - v, self.params.tau).mean(0)
        self.centre = v.detach().clone()
        return v

    def state_dict(self) -> dict:
        return {"centre": self.centre}

    def load_state_dict(self, state: dict) -> None:
        self.centre = state.get("centre")
