"""Model poisoning (docs/threats.md): the malicious clients among a round's chosen clients replace their
update before it goes up the channel. Sign flip uses the client's own update; Gaussian none; ALIE and IPM
are omniscient and colluding: every malicious client sends one vector forged from the round's honest
updates (their own true updates stand in where no honest client was chosen).

Written in torch on fgx's flat update vectors (fgx/federation/robust.py ``flatten``) and checked against
ByzFL's attacks in tests/test_threats.py; not called from ByzFL so that each forging step can be broken by
the mutation tests (scripts/known_mutations.py) and a run needs no optional package."""
from __future__ import annotations

from dataclasses import dataclass, field
from statistics import NormalDist

import torch

from fgx.config import spec
from fgx.federation.robust import flatten, unflatten
from fgx.registry import THREATS
from fgx.threats.base import Threat, ThreatParams


class ModelPoisoning(Threat):
    tampers_updates = True

    def choose(self, num_clients: int, seed: int) -> set[int]:
        self.seed = seed
        return super().choose(num_clients, seed)

    def tamper(self, cids, deltas, r):
        bad = self.malicious_positions(cids, self.malicious)
        if not bad:
            return deltas
        honest = [d for i, d in enumerate(deltas) if i not in bad] or [deltas[i] for i in bad]
        honest_vecs, keys = flatten(honest)
        out = list(deltas)
        for i in bad:
            own = flatten([deltas[i]])[0][0]
            out[i] = unflatten(self.forge(own, honest_vecs, len(cids), len(bad), r, cids[i]), keys, deltas[i])
        return out

    def forge(self, own: torch.Tensor, honest: torch.Tensor, n: int, f: int, r: int, cid: int) -> torch.Tensor:
        """The vector a malicious client sends: from its own update, the honest ones ([h, d]), the round's
        number of chosen clients n and malicious ones f."""
        raise NotImplementedError


@dataclass
class SignFlipParams(ThreatParams):
    scale: float = field(default=1.0, metadata=spec(gt=0.0, help=(
        "each malicious client sends -scale x its own update; with a fraction p of malicious clients the "
        "average moves along (1 - p - p scale) x the honest direction: stalls at scale (1 - p) / p")))


@THREATS.register("sign_flip", params=SignFlipParams)
class SignFlip(ModelPoisoning):
    """Sign flipping: the malicious client's own update, negated and scaled."""
    name = "sign_flip"

    def forge(self, own, honest, n, f, r, cid):
        return -self.params.scale * own


@dataclass
class GaussianParams(ThreatParams):
    mean: float = 0.0
    std: float = field(default=1.0, metadata=spec(gt=0.0, help="std of each coordinate of the random update"))


@THREATS.register("gaussian", params=GaussianParams)
class Gaussian(ModelPoisoning):
    """Gaussian noise: each malicious client sends N(mean, std^2 I), drawn from (seed, round, client)."""
    name = "gaussian"

    def forge(self, own, honest, n, f, r, cid):
        g = torch.Generator().manual_seed((self.seed * 1_000_003 + r) * 10_007 + cid)
        noise = torch.randn(own.numel(), generator=g, dtype=torch.float64)
        return (self.params.mean + self.params.std * noise).to(own.dtype)


@dataclass
class ALIEParams(ThreatParams):
    z: float | None = field(default=None, metadata=spec(help=(
        "honest stds added to the honest mean; null: Baruch et al.'s z_max = Phi^-1((n - s) / n), "
        "s = floor(n / 2 + 1) - f, from the round's n chosen and f malicious clients")))


def alie_z(n: int, f: int) -> float:
    """Baruch et al. 2019: the largest z for which the forged vector still has a majority of supporters."""
    s = n // 2 + 1 - f
    return NormalDist().inv_cdf((n - s) / n)


@THREATS.register("alie", params=ALIEParams)
class ALIE(ModelPoisoning):
    """A Little Is Enough (Baruch et al. 2019): the honest coordinate-wise mean plus z honest standard
    deviations (unbiased), small enough per coordinate to pass median- and distance-based filters."""
    name = "alie"

    def forge(self, own, honest, n, f, r, cid):
        z = self.params.z if self.params.z is not None else alie_z(n, f)
        std = honest.std(dim=0) if honest.size(0) > 1 else torch.zeros_like(honest[0])
        return honest.mean(0) + z * std


@dataclass
class IPMParams(ThreatParams):
    epsilon: float = field(default=0.1, metadata=spec(gt=0.0, help=(
        "the malicious update is -epsilon x the honest mean (Xie et al. 2020: small epsilon against median and "
        "Krum, large against the mean)")))


@THREATS.register("ipm", params=IPMParams)
class IPM(ModelPoisoning):
    """Inner product manipulation (Xie et al. 2020): -epsilon times the honest mean, so that the aggregate's
    inner product with the true direction turns negative."""
    name = "ipm"

    def forge(self, own, honest, n, f, r, cid):
        return -self.params.epsilon * honest.mean(0)
