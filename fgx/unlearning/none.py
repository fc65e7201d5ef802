"""``unlearning=none``: the run ends after training; no deletion requests are processed."""
from __future__ import annotations

from dataclasses import dataclass

from fgx.registry import UNLEARNING
from fgx.unlearning.base import UnlearningMethod


@dataclass
class NoUnlearningParams:
    pass


@UNLEARNING.register("none", params=NoUnlearningParams)
class NoUnlearning(UnlearningMethod):
    name = "none"

    def run(self, ctx, algorithm) -> dict | None:
        return None
