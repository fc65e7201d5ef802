"""Data poisoning by label flipping (docs/threats.md): each malicious client trains on its training items
relabelled y -> C - 1 - y (C classes; ByzFL's LabelFlipping, Allouah et al. 2023). Its validation and
test items keep their labels: the clean accuracy is scored on every client's true labels."""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from fgx.config import ConfigError
from fgx.registry import THREATS
from fgx.tasks import ITEM_PREFIX
from fgx.threats.base import Threat, ThreatParams


@dataclass
class LabelFlipParams(ThreatParams):
    pass


def flipped(y: torch.Tensor, num_classes: int) -> torch.Tensor:
    return num_classes - 1 - y


@THREATS.register("label_flip", params=LabelFlipParams)
class LabelFlip(Threat):
    name = "label_flip"
    poisons_data = True

    def poison_data(self, clients, info, seed):
        self.num_classes = info.num_classes
        self.prefix = ITEM_PREFIX.get(info.task, "")
        out = []
        for c in clients:
            if c.cid not in self.malicious:
                out.append(c)
                continue
            c = copy.copy(c)
            c.data = c.data.clone()
            y, train = getattr(c.data, f"{self.prefix}y"), getattr(c.data, f"{self.prefix}train_mask")
            pick = train & (y >= 0)          # halo nodes carry label -1
            y = y.clone()
            y[pick] = flipped(y[pick], info.num_classes)
            setattr(c.data, f"{self.prefix}y", y)
            out.append(c)
        return out

    def metrics(self, algo, evaluator) -> dict[str, float]:
        """flip_rate: the share of honest clients' test items (whose flipped label differs) predicted as
        their flipped label: how far the attack pulled the model towards it."""
        hits = total = 0
        for c in algo.ctx.clients:
            if c.cid in self.malicious:
                continue
            scores, y = algo.predict(c, splits=("test",))["test"]
            target = flipped(y, self.num_classes)
            keep = target != y
            hits += int((scores.argmax(-1)[keep] == target[keep]).sum())
            total += int(keep.sum())
        return {"flip_rate": hits / total} if total else {}

    @classmethod
    def check_config(cls, params, validated) -> None:
        from fgx.link.checks import run_task

        task = run_task(validated.top, validated.entries)
        if task not in ("node", "edge", "graph"):
            raise ConfigError("threat.name", "label_flip", f"a threat for the {task!r} task: label flipping "
                                                           f"relabels classification items (node, edge, graph tasks)")
