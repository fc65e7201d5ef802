"""Unlearning components run after training on the trained run: ``run(ctx, algorithm)`` processes
deletion requests and returns what ``unlearning.json`` records (certificate, costs, accuracy)."""
from __future__ import annotations

from dataclasses import dataclass

from fgx.registry import UNLEARNING


class UnlearningMethod:
    name = "base"

    def __init__(self, params):
        self.params = params

    def run(self, ctx, algorithm) -> dict | None:
        raise NotImplementedError


@dataclass
class NoUnlearningParams:
    pass


@UNLEARNING.register("none", params=NoUnlearningParams)
class NoUnlearning(UnlearningMethod):
    name = "none"

    def run(self, ctx, algorithm) -> dict | None:
        return None
