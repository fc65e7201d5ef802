"""Unlearning as a remedy for a backdoor (issue #70, Build item 4): ``unlearning.requests.selection=backdoor``.

After ``algorithm=certified_lr`` has trained, an attacker holding a share of the clients (chosen by the
run's seed) poisons some of their *training nodes* with a feature-space trigger (a fixed set of feature
columns set to ``trigger_value``: the rarest columns of the attacker's own data, as rare words make NLP
triggers) and relabels them to ``target_class`` (a dirty-label backdoor). The certified model is trained
again on the poisoned data (same preprocessing path, propagation and noise b as the run's), then the
poisoned nodes are removed by node deletion requests of the unlearning method (ScaleGUN, CGU, retrain),
each under its certificate. The attack success rate (ASR: the share of triggered test nodes whose label is
not the target that the model classifies as the target) and the clean test accuracy are measured for the
poisoned model (before), the released model after the last request (after), and a model retrained from
scratch on exact embeddings of the data without the poisoned nodes, with fresh noise (retrained: the
model the certificate compares with).

A triggered test node v is served as it would be if its own features carried the trigger: its propagated
row moves by sum_l w_l (A_hat^l)_vv (t - x_v) on the trigger columns (t: the trigger's preprocessed
values), on the current graph; the rest of the graph is unchanged. Preprocessing is column-wise affine
(standardisation, then one global scale), so every triggered row holds the same preprocessed values on
the trigger columns: t is read from a poisoned row after the poisoned data was preprocessed.

The injection here is self-contained (the threat framework's ``poison_data`` hook, issue #70's
``fgx/threats``, had not landed when this was written); it edits the clients' raw features and labels
in the certified model's own state, not the dataset on disk."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fgx.config import ConfigError, spec
from fgx.unlearning.attacks import _influence


@dataclass
class BackdoorParams:
    num_poison: int = field(default=40, metadata=spec(min=1, help="training nodes the attacker poisons"))
    malicious_fraction: float = field(default=0.2, metadata=spec(
        gt=0.0, max=1.0, help="share of the clients the attacker holds (at least one), chosen by the seed"))
    target_class: int = field(default=0, metadata=spec(min=0, help="the label triggered nodes should get"))
    trigger_size: int = field(default=10, metadata=spec(
        min=1, help="feature columns the trigger sets (the rarest in the attacker's own data)"))
    trigger_value: float = field(default=1.0, metadata=spec(help="raw value of the trigger columns"))


class BackdoorAttack:
    """The poisoned nodes (client id -> local node ids), the trigger and the ASR measurement."""

    def __init__(self, poisoned: dict[int, np.ndarray], malicious: list[int], columns: np.ndarray,
                 target: int, original_labels: dict[int, np.ndarray]):
        self.poisoned, self.malicious, self.columns, self.target = poisoned, malicious, columns, target
        self.original_labels = original_labels
        self.trigger: np.ndarray | None = None      # preprocessed values of the trigger columns

    @classmethod
    def inject(cls, parties, params: BackdoorParams, num_classes: int, rng) -> "BackdoorAttack":
        """Poison ``num_poison`` training nodes of the malicious clients (not of the target class): the
        trigger columns set to ``trigger_value``, the label set to ``target_class``. Raw data only: the
        caller preprocesses, propagates and trains again."""
        if params.target_class >= num_classes:
            raise ConfigError("unlearning.backdoor.target_class", params.target_class,
                              f"a class below {num_classes}")
        k = max(1, int(round(params.malicious_fraction * len(parties))))
        malicious = sorted(int(c) for c in rng.choice(len(parties), k, replace=False))
        own = np.vstack([parties[c].x_raw for c in malicious])
        if params.trigger_size > own.shape[1]:
            raise ConfigError("unlearning.backdoor.trigger_size", params.trigger_size,
                              f"at most the {own.shape[1]} feature columns")
        # the attacker's rarest columns (ties by index): what clean data rarely carries
        columns = np.sort(np.argsort(np.abs(own).sum(0), kind="stable")[:params.trigger_size])
        pool = [(c, int(u)) for c in malicious for u in parties[c].train_ids()
                if parties[c].y[u] != params.target_class]
        if len(pool) < params.num_poison:
            raise ConfigError("unlearning.backdoor.num_poison", params.num_poison,
                              f"at most {len(pool)} (training nodes of the malicious clients {malicious} "
                              f"outside the target class)")
        chosen = [pool[j] for j in rng.choice(len(pool), params.num_poison, replace=False)]
        poisoned: dict[int, list] = {}
        for c, u in chosen:
            poisoned.setdefault(c, []).append(u)
        poisoned_ids = {c: np.array(sorted(v), dtype=np.int64) for c, v in poisoned.items()}
        labels = {}
        for c, ids in poisoned_ids.items():
            p = parties[c]
            labels[c] = p.y[ids].copy()
            p.x_raw = p.x_raw.copy()           # the loader's array is not edited
            p.x_raw[np.ix_(ids, columns)] = params.trigger_value
            p.y = p.y.copy()
            p.y[ids] = params.target_class
        return cls(poisoned_ids, malicious, columns, params.target_class, labels)

    def read_trigger(self, parties) -> None:
        """The trigger's preprocessed values, from a poisoned row (preprocessing is column-wise affine)."""
        c = min(self.poisoned)
        self.trigger = parties[c].x[self.poisoned[c][0], self.columns].astype(np.float64)

    def items(self) -> list[tuple[int, int]]:
        return [(c, int(u)) for c in sorted(self.poisoned) for u in self.poisoned[c]]

    def record(self) -> dict:
        return {"malicious_clients": self.malicious, "poisoned_nodes": len(self.items()),
                "poisoned_per_client": {str(c): int(v.size) for c, v in self.poisoned.items()},
                "trigger_columns": [int(j) for j in self.columns], "target_class": int(self.target)}

    def triggered_rows(self, party, ids: np.ndarray) -> np.ndarray:
        """The served rows of ``ids`` when each carries the trigger on its own features (one at a time)."""
        z = party.prop.rows(ids).astype(np.float64)
        own = _influence(party.prop, ids, ids)            # sum_l w_l (A_hat^l)_vv on the current graph
        x = party.current_features()[np.ix_(ids, self.columns)].astype(np.float64)
        z[:, self.columns] += own[:, None] * (self.trigger[None, :] - x)
        return z

    def measure(self, server) -> dict[str, float]:
        """ASR on every client's triggered test nodes outside the target class, and clean test accuracy."""
        hit = total = 0
        for p in server.parties:
            ids = p.split_ids("test")
            ids = ids[p.y[ids] != self.target]
            if not ids.size:
                continue
            hit += int(((self.triggered_rows(p, ids) @ server.W).argmax(1) == self.target).sum())
            total += ids.size
        return {"asr": hit / max(total, 1), "test_accuracy": server.accuracy("test"), "triggered_items": total}
