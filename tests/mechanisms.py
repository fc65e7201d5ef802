"""Helpers for the mechanism tests (tests/test_mechanism_*.py): read what crossed the channel in a
run recorded by the ``recorded`` fixture (tests/conftest.py), and compare model-shaped payloads.

The mechanism tests check an algorithm's defining update from what the run actually sent and
received, with tolerances that survive refactors (float32 arithmetic, a different summation order),
never against numbers today's code happens to print."""
from __future__ import annotations

import torch


def messages(seen: dict, kind: str) -> list[tuple]:
    """(payload, src, dst, round) of every message of ``kind``, in sending order."""
    return [(p, src, dst, r) for k, p, src, dst, r in seen["sent"] if k == kind]


def by_round(seen: dict, kind: str) -> dict[int, list[tuple]]:
    """round -> [(src, dst, payload)] of ``kind``."""
    out: dict[int, list[tuple]] = {}
    for p, src, dst, r in messages(seen, kind):
        out.setdefault(r, []).append((src, dst, p))
    return out


def floats(d: dict) -> dict[str, torch.Tensor]:
    """The floating tensors of a state dict, as float64 (integer buffers are not averaged)."""
    return {k: v.detach().double().cpu() for k, v in d.items() if torch.is_tensor(v) and v.is_floating_point()}


def flat(d: dict) -> torch.Tensor:
    f = floats(d)
    return torch.cat([f[k].flatten() for k in sorted(f)])


def train_counts(clients) -> list[int]:
    """Training nodes each client owns (FedAvg's weights, FedPUB's n_j), from the client views."""
    return [int(c.data.train_mask[: c.num_owned].sum()) for c in clients]


def capture_setup(monkeypatch, cls, method: str = "setup") -> dict:
    """The algorithm object of an in-process run, in ``["algo"]`` once its ``method`` (``setup`` unless
    named) has been called."""
    seen, real = {}, getattr(cls, method)

    def wrapped(self, *a, **kw):
        seen["algo"] = self
        return real(self, *a, **kw)

    monkeypatch.setattr(cls, method, wrapped)
    return seen


def byzfl():
    """ByzFL (the reference of the robust aggregators and attacks; `pip install -e '.[byzfl]'`), or a skip.
    Its package __init__ imports its benchmark, which imports torchvision; its aggregators and attacks do not
    use it, so where torchvision does not load beside this torch (a CPU torch wheel with PyPI's torchvision)
    ByzFL is imported with an empty torchvision in its place."""
    import importlib
    import sys
    import types

    pytest = importlib.import_module("pytest")
    if importlib.util.find_spec("byzfl") is None:
        pytest.skip("byzfl is not installed (pip install -e '.[byzfl]')")
    try:
        return importlib.import_module("byzfl")
    except (ImportError, RuntimeError):
        for name in [m for m in sys.modules if m == "byzfl" or m.startswith(("byzfl.", "torchvision"))]:
            del sys.modules[name]
        class Inert(types.ModuleType):      # whatever ByzFL's benchmark builds from it at import: nothing
            def __getattr__(self, name):
                return lambda *a, **k: None

        fake = types.ModuleType("torchvision")
        fake.datasets, fake.transforms = Inert("datasets"), Inert("transforms")
        sys.modules.update({"torchvision": fake, "torchvision.datasets": fake.datasets,
                            "torchvision.transforms": fake.transforms})
        try:
            return importlib.import_module("byzfl")
        finally:
            for name in ("torchvision", "torchvision.datasets", "torchvision.transforms"):
                sys.modules.pop(name, None)
