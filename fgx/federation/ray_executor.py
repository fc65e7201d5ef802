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

Faults: actors are spread over the cluster's nodes. When an actor dies during a call (killed, its
process crashed, its node removed), the actor is re-created on a node that is still there (or,
when the cluster has no room left, its clients move to the surviving actors), the data of every
client it hosted is shipped again from the driver's own client objects, and those clients' calls of
this round are run again with the same seeds and the same state: the driver applies a call's result
only once it has it, so the state it ships is still the round's. The run ends with the metrics of an
undisturbed run. At most ``max_retries`` recoveries per call; then an error names the clients.
"""
from __future__ import annotations

import copy
import importlib.util
import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from fgx.config import ConfigError, spec
from fgx.federation.executor import Executor, client_key, run_seeded
from fgx.registry import EXECUTORS

INSTALL_HINT = "pip install -e '.[ray]' (or pip install 'ray>=2.9')"
log = logging.getLogger("fgx")


class ClientsLostError(RuntimeError):
    """Clients whose actor was lost more often in one call than ``executor.max_retries`` allows."""


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
    max_retries: int = field(default=3, metadata=spec(
        min=0, help="recoveries from lost actors (a node removed, a process killed) allowed per call"))
    recovery_timeout_s: float = field(default=60.0, metadata=spec(
        gt=0.0, help="how long a re-created actor may take to start; then its clients go to the surviving ones"))


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

    def node_id(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()


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


def fault_types(ray) -> tuple[type[Exception], ...]:
    """What a lost actor or node raises at ``ray.get``: its death (killed, crashed, node removed),
    its being unreachable, or its results gone with its node. An error of the client code itself
    (RayTaskError) is not among them: it is raised as in-process."""
    ex = ray.exceptions
    return ex.RayActorError, ex.ObjectLostError, ex.NodeDiedError


def describe_fault(err: Exception) -> str:
    """One line: the error's type and its untabbed message lines (Ray indents the actor's details)."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip() and not ln.startswith("\t")]
    return f"{type(err).__name__}: {' '.join(ln.rstrip('.') + '.' for ln in lines)}"[:300]


@EXECUTORS.register("ray", params=RayParams)
class RayExecutor(Executor):
    """Runs client work in Ray actors (a local Ray, or an existing cluster at ``address``)."""

    def __init__(self, params: RayParams | None = None):
        self.params = params or RayParams()
        self._ray = None
        self._started_ray = False
        self._actors: list = []                        # None where a lost actor's clients moved elsewhere
        self._nodes: dict[int, str] = {}               # actor index -> the node it runs on
        self._home: dict[int, tuple[Any, int]] = {}    # id(item) -> (item, actor index)
        self._adopting: dict[int, list] = {}           # actor index -> adopt calls not yet waited for
        self.nodes_used: set[str] = set()              # every node an actor of this run ran on
        self.recoveries: list[dict[str, Any]] = []     # one per lost actor: round, call, clients, nodes, cause

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
        self._actors = [self._new_actor() for _ in range(n)]
        self._nodes = dict(enumerate(ray.get([a.node_id.remote() for a in self._actors])))
        self.nodes_used.update(self._nodes.values())
        log.info("executor=ray: %d actors on %d nodes", n, len(set(self._nodes.values())))

    def _new_actor(self):
        p = self.params
        # SPREAD: actors go to different nodes while there are any, so one node lost costs few clients
        host = self._ray.remote(num_cpus=p.cpus_per_actor, num_gpus=p.gpus_per_actor)(ClientHost)
        return host.options(scheduling_strategy="SPREAD").remote(list(p.resident), p.torch_threads)

    def _adopt(self, item, slot: int) -> None:
        """Home ``item`` on actor ``slot`` and ship its resident fields there (from the driver's object)."""
        self._home[id(item)] = (item, slot)   # keeping the item keeps its id unique
        resident = self._ray.put({p: _get(item, p) for p in self.params.resident})
        self._adopting.setdefault(slot, []).append(self._actors[slot].adopt.remote(id(item), resident))

    def _submit(self, slot: int, fn: Callable, jobs: list, shared_args):
        return self._actors[slot].run.remote(fn, jobs, shared_args)

    def map(self, fn: Callable, items: list, *args: Any) -> list:
        if not items:
            return []
        self._start(len(items))
        ray = self._ray
        faults = fault_types(ray)
        paths = list(self.params.resident)
        for item in items:
            if id(item) not in self._home:              # once per client
                live = [s for s, a in enumerate(self._actors) if a is not None]
                self._adopt(item, live[len(self._home) % len(live)])
        seeds = self.client_seeds(items)
        shared_args = ray.put(args)   # one copy in the object store for every actor
        results: list[Any] = [None] * len(items)
        todo, attempt = list(range(len(items))), 0
        while True:
            per_actor: dict[int, list[int]] = {}
            for i in todo:
                per_actor.setdefault(self._home[id(items[i])][1], []).append(i)
            calls = {slot: self._submit(slot, fn, [(id(items[i]), strip(items[i], paths), seeds[i]) for i in idx],
                                        shared_args)
                     for slot, idx in per_actor.items()}
            lost: dict[int, Exception] = {}
            for slot, idx in per_actor.items():
                try:
                    out = ray.get([*self._adopting.pop(slot, []), calls[slot]])[-1]
                except faults as e:
                    lost[slot] = e
                    continue
                # a client's state changes only with a result in hand: a lost call leaves the round's state
                for i, (result, light) in zip(idx, out):
                    self._update(items[i], light, paths)
                    results[i] = result
            if not lost:
                return results
            todo = [i for slot, idx in per_actor.items() if slot in lost for i in idx]
            if attempt == self.params.max_retries:
                self._give_up(items, todo, lost)
            self._recover(lost, {client_key(items[i], i) for i in todo})
            attempt += 1

    def _recover(self, lost: dict[int, Exception], rerun: set[int]) -> None:
        """Re-create each lost actor, or, when the cluster has no room for it, move its clients to the
        surviving actors; either way every client it hosted gets its resident data again."""
        ray = self._ray
        for slot in lost:
            try:
                ray.kill(self._actors[slot])   # an unreachable actor that may come back would hold its CPUs
            except Exception:  # noqa: BLE001 - already gone
                pass
            self._actors[slot] = None
            self._adopting.pop(slot, None)
        for slot, err in lost.items():
            hosted = [item for item, s in self._home.values() if s == slot]
            lost_node = self._nodes.get(slot) or "?"
            replacement = self._replacement()
            if replacement is not None:
                self._actors[slot], self._nodes[slot] = replacement
                self.nodes_used.add(self._nodes[slot])
                targets = [slot] * len(hosted)
            else:
                live = [s for s, a in enumerate(self._actors) if a is not None]
                if not live:
                    self.shutdown()
                    raise ClientsLostError(f"executor=ray: every actor is lost and the cluster has no room for a "
                                           f"new one (last: {describe_fault(err)}); check the cluster (ray status)")
                targets = [live[j % len(live)] for j in range(len(hosted))]
            for item, target in zip(hosted, targets):
                self._adopt(item, target)
            keys = sorted(client_key(item, -1) for item in hosted)
            where = sorted({self._nodes[t] for t in targets})
            event = {"round": self.round, "call": self.calls - 1, "actor": slot, "clients": keys,
                     "rerun": sorted(k for k in keys if k in rerun), "lost_node": lost_node,
                     "new_nodes": where, "recreated": replacement is not None, "cause": describe_fault(err)}
            self.recoveries.append(event)
            log.warning("executor=ray: actor %d (node %s) lost in round %d: %s; its clients %s %s on node(s) %s, "
                        "this round's calls of %s run again", slot, lost_node[:8], self.round,
                        event["cause"], keys, "re-created" if replacement is not None else "moved to surviving actors",
                        ", ".join(n[:8] for n in where), event["rerun"])

    def _replacement(self):
        """(actor, node) of a new actor on a live node, or None when the cluster has no room for one."""
        ray, p = self._ray, self.params
        alive = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
        live = sum(a is not None for a in self._actors) + 1
        if (sum(r.get("CPU", 0.0) for r in alive) < live * p.cpus_per_actor
                or sum(r.get("GPU", 0.0) for r in alive) < live * p.gpus_per_actor):
            return None
        actor = self._new_actor()
        try:
            # waits for a free CPU too: a removed node's work may still be releasing its share
            return actor, ray.get(actor.node_id.remote(), timeout=p.recovery_timeout_s)
        except (ray.exceptions.GetTimeoutError, *fault_types(ray)):
            ray.kill(actor)
            return None

    def _give_up(self, items: list, todo: list[int], lost: dict[int, Exception]) -> None:
        keys = sorted(client_key(items[i], i) for i in todo)
        causes = "; ".join(sorted({describe_fault(e) for e in lost.values()}))
        self.shutdown()
        raise ClientsLostError(
            f"executor=ray: clients {keys} could not be run in round {self.round}: their actors were lost "
            f"{self.params.max_retries + 1} times in this call (executor.max_retries={self.params.max_retries}); "
            f"last cause: {causes}")

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
        return self._ray.get([a.resident_bytes.remote() for a in self._actors if a is not None])

    def client_nodes(self) -> dict[int, str]:
        """Client key -> the node its actor runs on now."""
        return {client_key(item, -1): self._nodes[slot] for item, slot in self._home.values()}

    def shutdown(self) -> None:
        if self._ray is None:
            return
        for a in self._actors:
            if a is not None:
                self._ray.kill(a)
        self._actors, self._home, self._adopting = [], {}, {}
        if self._started_ray:
            self._ray.shutdown()
        self._ray = None
