"""``executor=ray``: client work runs in Ray actors that keep the clients' data.

Each client is assigned to one actor (round-robin; one actor per client when there are enough
CPUs). The first time a client is mapped, its resident fields (its data view and sampler, see
``resident``) go into the Ray object store once and the actor keeps them; afterwards each call
ships only the client's small mutable state (model, optimiser, per-round buffers) and gets it back
updated, so the algorithm's own client objects stay current and algorithm code is unchanged. A
round's shared arguments (global weights, ...) are put in the object store once and every actor
reads that one object, not a copy per client.

The same seed gives the same metrics as the in-process executor: each client call runs under
``client_rng`` with the seed the driver derived from (seed, round, call, client), exactly as
in-process, so dropout and other global-RNG draws agree (docs/scaling.md).
"""
from __future__ import annotations

import copy
import importlib.util
from dataclasses import dataclass, field
from typing import Any, Callable

from fgx.config import ConfigError, spec
from fgx.federation.executor import Executor, run_seeded
from fgx.registry import EXECUTORS

INSTALL_HINT = "pip install -e '.[ray]' (or pip install 'ray>=2.9')"


@dataclass
class RayParams:
    address: str | None = field(default=None, metadata=spec(
        help="an existing cluster ('auto', 'ray://host:10001', 'host:6379'); null: start a local Ray"))
    num_cpus: int | None = field(default=None, metadata=spec(
        min=1, help="CPUs of the local Ray started when address is null; null: all of this machine's"))
    actors: int | None = field(default=None, metadata=spec(
        min=1, help="number of actors; null: one per client, at most the cluster's CPUs / cpus_per_actor"))
    cpus_per_actor: float = field(default=1.0, metadata=spec(gt=0.0))
    gpus_per_actor: float = field(default=0.0, metadata=spec(min=0.0, help="> 0 with device=cuda"))
    torch_threads: int = field(default=1, metadata=spec(min=1, help="torch intra-op threads in each actor"))
    resident: list[str] = field(default_factory=lambda: ["view", "sampler"], metadata=spec(
        help="client fields shipped once and kept by the actor (read-only after setup); "
             "'a.b' is key b of dict field a"))


def _get(obj, path: str):
    head, _, key = path.partition(".")
    val = getattr(obj, head, None)
    if key:
        return val.get(key) if isinstance(val, dict) else None
    return val


def strip(obj, paths: list[str]):
    """A shallow copy of ``obj`` without its resident fields (dict fields are copied before a key
    is removed, so the original keeps it)."""
    light = copy.copy(obj)
    for path in paths:
        head, _, key = path.partition(".")
        if not hasattr(light, head):
            continue
        if key:
            val = getattr(light, head)
            if isinstance(val, dict) and key in val:
                val = dict(val)
                val.pop(key)
                setattr(light, head, val)
        else:
            setattr(light, head, None)
    return light


def attach(obj, resident: dict[str, Any]) -> None:
    for path, val in resident.items():
        head, _, key = path.partition(".")
        if key:
            d = getattr(obj, head, None)
            if isinstance(d, dict) and val is not None:
                d[key] = val
        elif hasattr(obj, head):
            setattr(obj, head, val)


class ClientHost:
    """Actor body: holds the resident data of the clients assigned to it and runs their work."""

    def __init__(self, paths: list[str], torch_threads: int):
        import torch

        torch.set_num_threads(torch_threads)
        self.paths = paths
        self.resident: dict[int, dict[str, Any]] = {}

    def adopt(self, key: int, resident: dict[str, Any]) -> None:
        self.resident[key] = resident

    def run(self, fn: Callable, jobs: list[tuple[int, Any, int]], args: tuple) -> list[tuple[Any, Any]]:
        out = []
        for key, light, seed in jobs:
            attach(light, self.resident[key])
            result = run_seeded(fn, light, args, seed)
            # whatever the work built lazily (e.g. a sampler) stays here for the next round
            self.resident[key] = {p: _get(light, p) for p in self.paths}
            out.append((result, strip(light, self.paths)))
        return out

    def resident_bytes(self) -> int:
        return sum(tensor_bytes(v) for r in self.resident.values() for v in r.values())


def tensor_bytes(obj, depth: int = 0) -> int:
    """Bytes of the tensors reachable from ``obj`` (tensors, dicts, lists, PyG Data, plain objects)."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if depth > 4 or obj is None or isinstance(obj, (int, float, str, bool)):
        return 0
    if isinstance(obj, dict):
        return sum(tensor_bytes(v, depth + 1) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v, depth + 1) for v in obj)
    if hasattr(obj, "to_dict"):
        return tensor_bytes(obj.to_dict(), depth + 1)
    if hasattr(obj, "__dict__"):
        return tensor_bytes(vars(obj), depth + 1)
    return 0


@EXECUTORS.register("ray", params=RayParams)
class RayExecutor(Executor):
    """Runs client work in Ray actors (a local Ray, or an existing cluster at ``address``)."""

    def __init__(self, params: RayParams | None = None):
        self.params = params or RayParams()
        self._ray = None
        self._started_ray = False
        self._actors: list = []
        self._home: dict[int, tuple[Any, int]] = {}    # id(item) -> (item, actor index)

    @classmethod
    def check_config(cls, params: RayParams, validated) -> None:
        if importlib.util.find_spec("ray") is None:
            raise ConfigError("executor.name", "ray", f"'local', or install Ray first: {INSTALL_HINT}")
        if params.address and params.num_cpus is not None:
            raise ConfigError("executor.num_cpus", params.num_cpus,
                              "null when executor.address is set (the cluster decides its CPUs)")
        if params.gpus_per_actor > 0 and validated.top.device == "cpu":
            raise ConfigError("executor.gpus_per_actor", params.gpus_per_actor, "0 with device=cpu")

    def _start(self, n_items: int) -> None:
        if self._ray is not None:
            return
        import ray

        self._ray = ray
        if not ray.is_initialized():
            p = self.params
            ray.init(address=p.address, num_cpus=p.num_cpus if not p.address else None,
                     include_dashboard=False, log_to_driver=True, configure_logging=False)
            self._started_ray = True
        p = self.params
        if p.actors is not None:
            n = p.actors
        else:
            cpus = float(ray.cluster_resources().get("CPU", 1))
            n = max(1, min(n_items, int(cpus // p.cpus_per_actor)))
        host = ray.remote(num_cpus=p.cpus_per_actor, num_gpus=p.gpus_per_actor)(ClientHost)
        self._actors = [host.remote(list(p.resident), p.torch_threads) for _ in range(n)]

    def map(self, fn: Callable, items: list, *args: Any) -> list:
        if not items:
            return []
        self._start(len(items))
        ray = self._ray
        paths = list(self.params.resident)
        adopted = []
        for item in items:
            if id(item) not in self._home:
                slot = len(self._home) % len(self._actors)
                self._home[id(item)] = (item, slot)   # keeping the item keeps its id unique
                resident = ray.put({p: _get(item, p) for p in paths})   # once per client
                adopted.append(self._actors[slot].adopt.remote(id(item), resident))
        ray.get(adopted)
        seeds = self.client_seeds(items)
        shared_args = ray.put(args)   # one copy in the object store for every actor
        per_actor: dict[int, list[int]] = {}
        for i, item in enumerate(items):
            per_actor.setdefault(self._home[id(item)][1], []).append(i)
        calls = {slot: self._actors[slot].run.remote(fn, [(id(items[i]), strip(items[i], paths), seeds[i])
                                                                     for i in idx],
                                                      shared_args)
                 for slot, idx in per_actor.items()}
        results: list[Any] = [None] * len(items)
        for slot, idx in per_actor.items():
            for i, (result, light) in zip(idx, ray.get(calls[slot])):
                self._update(items[i], light, paths)
                results[i] = result
        return results

    @staticmethod
    def _update(item, light, paths: list[str]) -> None:
        """Copy the client's state as the actor left it into the algorithm's own object."""
        tops = {p.partition(".")[0]: p for p in paths}
        for name, val in vars(light).items():
            path = tops.get(name)
            if path is None:
                setattr(item, name, val)
            elif "." in path and isinstance(val, dict):
                key = path.partition(".")[2]
                mine = getattr(item, name)
                kept = mine.get(key) if isinstance(mine, dict) else None
                merged = dict(val)
                if kept is not None:
                    merged[key] = kept
                setattr(item, name, merged)

    def resident_bytes(self) -> list[int]:
        """Bytes of client data each actor holds (for tests and the benchmark)."""
        if self._ray is None:
            return []
        return self._ray.get([a.resident_bytes.remote() for a in self._actors])

    def shutdown(self) -> None:
        if self._ray is None:
            return
        for a in self._actors:
            self._ray.kill(a)
        self._actors, self._home = [], {}
        if self._started_ray:
            self._ray.shutdown()
        self._ray = None
