"""The Threat interface (``ctx.threat``, built by the trainer like ``ctx.privacy``) and ``threat=none``.

A threat picks its malicious clients from the run's seed (``choose``), may poison their data before the
algorithm's setup (``poison_data``: label flip, backdoor triggers), may tamper with their updates in the
aggregate phase after every chosen client trained and before the updates go up the channel (``tamper``:
an omniscient attacker sees the round's honest updates), and says what it achieved at an evaluation
(``metrics``). Algorithms whose aggregate phase calls ``tamper`` and the aggregator declare
``threat_hooks`` (fgx/algorithms/base.py ``calls_threat_hooks``); a threat that tampers is refused on any
other before work starts."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fgx.config import ConfigError, spec
from fgx.registry import THREATS


@dataclass
class ThreatParams:
    fraction: float = field(default=0.2, metadata=spec(min=0.0, max=1.0, help=(
        "fraction of the clients that are malicious: round(fraction * clients), drawn from the run's seed")))


def choose_malicious(num_clients: int, fraction: float, seed: int) -> set[int]:
    """round(fraction * num_clients) client ids drawn without replacement from the run's seed (the same
    clients for every attack and aggregator of a seed: paired comparisons)."""
    k = int(round(fraction * num_clients))
    g = torch.Generator().manual_seed(seed * 1_000_003 + 70)
    return set(torch.randperm(num_clients, generator=g)[:k].tolist())


class Threat:
    name = "none"
    tampers_updates = False     # True: ``tamper`` changes updates (needs an algorithm that calls the hooks)
    poisons_data = False        # True: ``poison_data`` changes the malicious clients' data

    def __init__(self, params):
        self.params = params
        self.malicious: set[int] = set()

    def choose(self, num_clients: int, seed: int) -> set[int]:
        self.malicious = choose_malicious(num_clients, getattr(self.params, "fraction", 0.0), seed)
        return self.malicious

    def poison_data(self, clients: list, info, seed: int) -> list:
        return clients

    def tamper(self, cids: list[int], deltas: list[dict[str, torch.Tensor]], r: int) -> list[dict[str, torch.Tensor]]:
        return deltas

    def metrics(self, algo, evaluator) -> dict[str, float]:
        return {}

    def report(self) -> dict:
        """What summary.json says of the threat: its name and the malicious clients."""
        return {"name": self.name, "malicious": sorted(self.malicious)}

    @classmethod
    def check_config(cls, params, validated) -> None:
        """Refuse a threat that tampers with updates on an algorithm whose aggregate phase does not call
        the hook: it would be silently ignored."""
        if not cls.tampers_updates:
            return
        from fgx.algorithms.base import calls_threat_hooks

        algo = validated.entries["algorithm"].obj
        if not calls_threat_hooks(algo):
            raise ConfigError("threat.name", validated.names["threat"], (
                f"'none' or a data-poisoning threat with algorithm '{validated.names['algorithm']}': its aggregate "
                f"phase does not call the threat hooks (threat.tamper, the aggregator), so a model-poisoning "
                f"attack would be ignored; FedAvg and the algorithms that keep its aggregate phase call them"))

    @staticmethod
    def malicious_positions(cids: list[int], malicious: set[int]) -> list[int]:
        return [i for i, c in enumerate(cids) if c in malicious]


@dataclass
class NoThreatParams:
    pass


@THREATS.register("none", params=NoThreatParams)
class NoThreat(Threat):
    """No attack: no client is malicious; updates and data are left as they are."""
    name = "none"

    def choose(self, num_clients: int, seed: int) -> set[int]:
        return self.malicious
