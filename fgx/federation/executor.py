"""Where client work runs. Algorithms call ``ctx.executor.map(fn, clients, *args)``; the executor
decides whether that is a loop in this process or remote actors."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from fgx.registry import EXECUTORS


class Executor:
    def map(self, fn: Callable, items: list, *args: Any) -> list:
        raise NotImplementedError

    def shutdown(self) -> None:
        pass


@dataclass
class InProcessParams:
    pass


@EXECUTORS.register("local", params=InProcessParams)
class InProcessExecutor(Executor):
    """Runs client work sequentially in this process (deterministic, the default)."""

    def __init__(self, params=None):
        self.params = params

    def map(self, fn: Callable, items: list, *args: Any) -> list:
        return [fn(item, *args) for item in items]
