"""One registry per config group. Components register themselves on import. Asked for ``X``, a
registry imports ``fgx/<group>/X.py``, and every module of its package only when that does not
register ``X`` (or when asked for all names), so adding a file to ``fgx/<group>/`` is all it takes
to add a component, and a run imports only what it uses."""
from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from dataclasses import dataclass
from typing import Any, Callable


@dataclass
class Entry:
    name: str
    obj: Any
    params: type | None
    module: str
    meta: dict = dataclasses.field(default_factory=dict)   # e.g. tasks=("node", "edge")


class Registry:
    def __init__(self, group: str, package: str):
        self.group = group
        self.package = package
        self._entries: dict[str, Entry] = {}
        self._loaded = False

    def register(self, name: str, params: type | None = None, **meta) -> Callable:
        """``meta`` declares static facts checked before any work, e.g. ``tasks=("node",)``: the
        task a dataset produces, or the tasks an algorithm/model supports."""
        if params is not None and not dataclasses.is_dataclass(params):
            raise TypeError(f"{self.group} '{name}': params must be a dataclass")

        def deco(obj):
            if name in self._entries and self._entries[name].obj is not obj:
                raise ValueError(f"{self.group} '{name}' registered twice "
                                 f"({self._entries[name].module} and {obj.__module__})")
            self._entries[name] = Entry(name, obj, params, obj.__module__, meta)
            return obj

        return deco

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        pkg = importlib.import_module(self.package)
        for mod in pkgutil.walk_packages(pkg.__path__, prefix=self.package + "."):
            importlib.import_module(mod.name)

    def names(self) -> list[str]:
        self._load()
        return sorted(self._entries)

    def _load_one(self, name: str) -> None:
        """``name``'s own module (``algorithm=fedavg`` lives in ``fgx/algorithms/fedavg.py``), so that a
        run imports the components it uses and not every other one (and their libraries: start-up)."""
        if name in self._entries or self._loaded or not name.isidentifier():
            return
        module = f"{self.package}.{name}"
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name != module:
                raise

    def get(self, name: str) -> Entry:
        self._load_one(name)
        if name not in self._entries:
            self._load()
        if name not in self._entries:
            from fgx.errors import ConfigError
            raise ConfigError(f"{self.group}.name", name, f"one of {self.names()}")
        return self._entries[name]

    def __contains__(self, name: str) -> bool:
        self._load_one(name)
        if name not in self._entries:
            self._load()
        return name in self._entries


DATASETS = Registry("dataset", "fgx.data")
PARTITIONERS = Registry("partitioner", "fgx.partition")
MODELS = Registry("model", "fgx.models")
ALGORITHMS = Registry("algorithm", "fgx.algorithms")
PRIVACY = Registry("privacy", "fgx.privacy")
UNLEARNING = Registry("unlearning", "fgx.unlearning")
EXECUTORS = Registry("executor", "fgx.federation")
THREATS = Registry("threat", "fgx.threats")                 # attacks (docs/threats.md)
AGGREGATORS = Registry("aggregator", "fgx.federation")      # the server's rule over updates (fgx/federation/robust.py)

GROUPS: dict[str, Registry] = {r.group: r for r in
                               (DATASETS, PARTITIONERS, MODELS, ALGORITHMS, PRIVACY, UNLEARNING, EXECUTORS,
                                THREATS, AGGREGATORS)}
