"""Where client work runs. Algorithms call ``ctx.executor.map(fn, clients, *args)``; the executor
decides whether that is a loop in this process or remote actors.

Every client call runs inside :func:`client_rng`: torch's (CPU and CUDA), NumPy's and Python's
global random generators are seeded by (run seed, round, call of the round, client id) and restored
afterwards. Dropout and any other draw from a global RNG inside client code is therefore the same
whichever executor, process or actor runs the client, and server-side draws never depend on how
many numbers the clients consumed. Algorithms get this without doing anything."""
from __future__ import annotations

import random
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from fgx.registry import EXECUTORS


def client_seed(seed: int, round: int, call: int, client: int) -> int:
    """The seed of one client's work: call ``call`` (0, 1, ... within the round) of round ``round``
    (0 is setup). NumPy's SeedSequence hashes the tuple, so nearby tuples give unrelated streams."""
    words = np.random.SeedSequence([int(seed), int(round), int(call), int(client)]).generate_state(2)
    return (int(words[0]) << 31 | int(words[1]) >> 1) & ((1 << 63) - 1)


@contextmanager
def client_rng(seed: int):
    """Run the body with every global RNG seeded by ``seed``; the caller's RNG states come back after."""
    # torch.manual_seed and fork_rng also visit every accelerator backend and numpy's legacy get_state builds
    # a tuple around its 624-word key: ~180 us a call, a tenth of a client's local step on Cora. This does the
    # same for the CPU generator (and CUDA when it is in use) with the generators' own state objects.
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    cpu_state = torch.default_generator.get_state()
    cuda_state = torch.cuda.get_rng_state_all() if cuda else None
    py_state, np_state = random.getstate(), np.random.get_state(legacy=False)
    torch.default_generator.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)      # lazily when CUDA is not initialised yet, as torch.manual_seed
    np.random.seed(seed % 2**32)
    random.seed(seed)
    try:
        yield
    finally:
        torch.default_generator.set_state(cpu_state)
        if cuda_state is not None:
            torch.cuda.set_rng_state_all(cuda_state)
        random.setstate(py_state)
        np.random.set_state(np_state)


def client_key(item: Any, position: int) -> int:
    cid = getattr(item, "cid", None)
    return int(cid) if isinstance(cid, (int, np.integer)) and not isinstance(cid, bool) else position


def run_seeded(fn: Callable, item: Any, args: tuple, seed: int) -> Any:
    with client_rng(seed):
        return fn(item, *args)


class Executor:
    seed: int = 0
    round: int = 0
    calls: int = 0

    def start_round(self, seed: int, r: int) -> None:
        """The trainer calls this before setup (r = 0) and before each round."""
        self.seed, self.round, self.calls = int(seed), int(r), 0

    def client_seeds(self, items: list) -> list[int]:
        """One seed per item for this ``map`` call (each call of a round gets its own)."""
        call = self.calls
        self.calls += 1
        return [client_seed(self.seed, self.round, call, client_key(item, i)) for i, item in enumerate(items)]

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
        seeds = self.client_seeds(items)
        return [run_seeded(fn, item, args, s) for item, s in zip(items, seeds)]
