"""``secure_aggregation=none|pairwise_mask|ckks``: how the averaging server gets the weighted average of the
round's updates. none (the default) receives each update in clear, as always; pairwise_mask
(fgx/federation/secagg.py, Bonawitz et al. 2017, with dropouts) and ckks (fgx/federation/ckks.py,
TenSEAL) let it learn only the sum.

Weighting: client i multiplies its update by w_i / W before masking or encrypting, where w_i is its
weight (training items, or 1 with ``algorithm.weighting=uniform``) and W the sum over the round's chosen
clients; the server, which knows every w_i (as in the plain average), gets sum_i (w_i / W) x_i and, when
clients dropped out, rescales by W / W_survivors. Revealed to the server: the weights, who dropped out,
and the weighted average itself (what it needs to update the global model); not any one update.

Only the update message is protected: an algorithm whose server reads individual updates declares why
(``needs_individual_updates`` on the algorithm class) and is refused, as is an algorithm whose aggregate
phase is not the plain average's, a privacy mechanism that works on the clear updates or noises the aggregate on the
server, and a robust aggregator (it compares individual updates)."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import torch

from fgx.config import ConfigError, spec
from fgx.federation.channel import Message
from fgx.registry import SECURE_AGGREGATION


class NoSecureAggregation:
    """The server receives each update in clear (the plain round's ``update`` message)."""
    active = False

    def __init__(self, params=None, seed: int = 0):
        self.params = params
        self.seed = seed

    @classmethod
    def check_config(cls, params, validated) -> None:
        return None

    def messages(self, messages: dict[str, Message], algo_cls) -> dict[str, Message]:
        return messages


SECURE_AGGREGATION.register("none")(NoSecureAggregation)


def accepts_algorithm(algo_cls) -> bool:
    """The plain-averaging round and the methods that inherit its aggregate phase as it is, with no reason to read updates one
    by one: secure aggregation replaces that phase's weighted average and nothing else."""
    return isinstance(algo_cls, type) and algo_cls.averages_updates_plainly()


def refusal(validated) -> str | None:
    """Why this run cannot aggregate securely (None: it can)."""
    names, entries = validated.names, validated.entries
    algo, algo_cls = names["algorithm"], entries["algorithm"].obj
    reason = getattr(algo_cls, "needs_individual_updates", None)
    if reason:
        return f"algorithm '{algo}' needs the individual updates: {reason}"
    if not accepts_algorithm(algo_cls):
        return (f"algorithm '{algo}' has an aggregate phase of its own: secure aggregation replaces the plain "
                f"weighted average of the clients' updates (docs/threats.md lists the algorithms whose aggregate phase it is)")
    from fgx.privacy.base import PrivacyMechanism

    mech = entries["privacy"].obj
    if mech.aggregate is not PrivacyMechanism.aggregate:
        return (f"privacy '{names['privacy']}' noises the aggregate on the server, which under secure aggregation "
                f"would first see the exact sum: its ε would not hold against the server (distributed noise, each "
                f"client adding its share before masking, is not implemented)")
    if names["privacy"] != "none":
        return f"privacy '{names['privacy']}' works on the clear update messages, which secure aggregation replaces"
    aggregator = names.get("aggregator")       # the robust aggregators (fgx/federation/robust.py)
    if aggregator not in (None, "mean"):
        return f"aggregator '{aggregator}' compares the individual updates; secure aggregation gives the server only their sum"
    pre = getattr(validated.params.get("aggregator"), "pre", "none")
    if pre != "none":
        return f"aggregator.pre={pre} works on each update on the server; secure aggregation gives it only their sum"
    return None


class SecureAggregation(NoSecureAggregation):
    """What pairwise_mask and ckks share: the refusals, the declared kinds, the weighting."""
    active = True
    kinds: tuple[str, ...] = ()

    @classmethod
    def check_config(cls, params, validated) -> None:
        why = refusal(validated)
        if why:
            raise ConfigError("secure_aggregation.name", validated.names["secure_aggregation"],
                              f"none ({why})")

    def messages(self, messages: dict[str, Message], algo_cls) -> dict[str, Message]:
        """The algorithm's kinds without its clear update, plus the protocol's: the channel refuses a clear
        update from here on."""
        out = {k: m for k, m in messages.items() if k != algo_cls.up}
        for kind in self.kinds:
            out[kind] = Message("down" if kind in self.down_kinds else "up")
        return out

    down_kinds: tuple[str, ...] = ()

    def average(self, channel, cids: list[int], deltas: list[dict], weights: list[float], r: int
                ) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
        """The weighted average of the floating-point entries of ``deltas`` as the server learns it
        (integer entries, such as BatchNorm's step counter, get a zero update)."""
        total_w = float(sum(weights))
        floats = [k for k, v in deltas[0].items() if v.is_floating_point()]
        vectors = [torch.cat([d[k].detach().double().view(-1) for k in floats]) * (w / total_w)
                   for d, w in zip(deltas, weights)]
        summed, kept, stats = self.secure_sum(channel, cids, vectors, r)
        kept_w = sum(w for c, w in zip(cids, weights) if c in kept)
        summed = summed * (total_w / kept_w) if kept_w != total_w else summed
        out, at = {}, 0
        for k, v in deltas[0].items():
            if k in floats:
                out[k] = summed[at:at + v.numel()].view_as(v).to(v.dtype)
                at += v.numel()
            else:
                out[k] = torch.zeros_like(v)
        return out, stats

    def secure_sum(self, channel, cids, vectors, r) -> tuple[torch.Tensor, set, dict]:
        raise NotImplementedError


@dataclass
class PairwiseMaskParams:
    fractional_bits: int = field(default=32, metadata=spec(
        min=8, max=48, help="fixed point: updates are rounded to multiples of 2^-fractional_bits before masking "
                            "(the ring is Z_2^62: larger values leave less room for the sum)"))
    threshold: float = field(default=0.5, metadata=spec(
        min=0.0, max=0.99, help="Shamir threshold t = floor(threshold * n) + 1 of the round's n clients: the "
                                "server needs t survivors to unmask (and t colluding parties to unmask anyone)"))
    dropout: float = field(default=0.0, metadata=spec(
        min=0.0, max=0.99, help="fraction of each round's chosen clients that drop out after masking (simulated, "
                                "drawn from the run's seed); their pairwise masks are recovered from the "
                                "survivors' shares"))

    def validate(self, prefix: str) -> None:
        if self.dropout >= 1.0 - self.threshold:
            raise ConfigError(f"{prefix}.dropout", self.dropout,
                              f"< 1 - threshold = {1.0 - self.threshold:.2f} (more dropouts leave fewer survivors "
                              f"than the t shares that unmask the sum)")


@SECURE_AGGREGATION.register("pairwise_mask", params=PairwiseMaskParams)
class PairwiseMaskAggregation(SecureAggregation):
    from fgx.federation.secagg import MESSAGES as kinds
    down_kinds = ("secagg_public_keys", "secagg_shares_routed", "secagg_dropped")

    def __init__(self, params, seed: int = 0):
        from fgx.federation.secagg import PairwiseMasking

        super().__init__(params, seed)
        self.protocol = PairwiseMasking(params.fractional_bits, params.threshold, seed)

    def dropped(self, cids: list[int], r: int) -> set[int]:
        """This round's dropouts: round(dropout * n) of the chosen clients, drawn from (seed, round)."""
        k = int(round(self.params.dropout * len(cids)))
        if k == 0:
            return set()
        g = torch.Generator().manual_seed(int.from_bytes(hashlib.sha256(
            f"secagg-dropout/{self.seed}/{r}".encode()).digest()[:7], "little"))
        return {cids[i] for i in torch.randperm(len(cids), generator=g)[:k].tolist()}

    def secure_sum(self, channel, cids, vectors, r):
        dropped = self.dropped(cids, r)
        summed, survivors = self.protocol.sum(channel, cids, vectors, dropped, r)
        return summed, set(survivors), {"secagg_dropped": float(len(dropped))}


@dataclass
class CKKSParams:
    poly_modulus_degree: int = field(default=8192, metadata=spec(
        choices=[4096, 8192, 16384], help="CKKS ring dimension N: N/2 values per ciphertext"))
    coeff_mod_bit_sizes: list[int] = field(default_factory=lambda: [60, 40, 60], metadata=spec(
        min=20, max=60, help="bit sizes of the coefficient modulus primes (additions only: one level suffices)"))
    scale_bits: int = field(default=40, metadata=spec(min=20, max=59, help="encoding scale 2^scale_bits"))


@SECURE_AGGREGATION.register("ckks", params=CKKSParams)
class CKKSSecureAggregation(SecureAggregation):
    from fgx.federation.ckks import MESSAGES as kinds
    down_kinds = ("encrypted_sum",)

    @classmethod
    def check_config(cls, params, validated) -> None:
        super().check_config(params, validated)
        import importlib.util

        if importlib.util.find_spec("tenseal") is None:
            raise ConfigError("secure_aggregation.name", "ckks", "an installed TenSEAL (pip install 'fgx[tenseal]') "
                                                                 "or pairwise_mask")

    def __init__(self, params, seed: int = 0):
        from fgx.federation.ckks import CKKSAggregation

        super().__init__(params, seed)
        self.protocol = CKKSAggregation(params.poly_modulus_degree, params.coeff_mod_bit_sizes, params.scale_bits)

    def secure_sum(self, channel, cids, vectors, r):
        # the key holder: the round's first chosen client (any client holds the clients' shared key)
        return self.protocol.sum(channel, cids, vectors, key_holder=cids[0], r=r), set(cids), {}
