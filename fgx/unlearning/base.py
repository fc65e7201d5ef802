"""Unlearning components run after training on the trained run: ``run(ctx, algorithm)`` processes
deletion requests and returns what ``unlearning.json`` records (certificate, costs, accuracy)."""
from __future__ import annotations


class UnlearningMethod:
    name = "base"

    def __init__(self, params):
        self.params = params

    def run(self, ctx, algorithm) -> dict | None:
        raise NotImplementedError
