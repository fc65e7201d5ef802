"""Ray's API as fgx's RayExecutor uses it, simulated in this process, for fast tests of the executor's own
logic (tests/test_ray_cluster.py runs the real thing on a simulated cluster, slowly).

What it keeps of Ray: arguments and results cross a pickle boundary (an actor never shares objects with
the driver), an actor's calls run in the order they were submitted, and a killed actor, or an actor on a
removed node, fails its pending and later calls with ``ray.exceptions.ActorDiedError``. A call runs when
its result is fetched, so a fault delivered after submitting and before ``ray.get`` hits it in flight."""
from __future__ import annotations

import importlib.util
import pickle

import ray.exceptions
from ray import cloudpickle   # the copy Ray ships (and pickles with)


class ObjectRef:
    """A ``put`` value, or an actor call's result (computed, with every earlier call of that actor, when
    first fetched)."""

    def __init__(self, value: bytes | None = None, actor=None, call=None):
        self.value, self.actor, self.call, self.error = value, actor, call, None

    def execute(self):
        name, payload = self.call
        self.call = None
        try:
            self.value = pickle.dumps(self.actor._invoke(name, payload))
        except ray.exceptions.RayError as e:
            self.error = e

    def fetch(self):
        if self.call is not None:
            self.actor._run_through(self)
        if self.error is not None:
            raise self.error
        return pickle.loads(self.value)

    def __reduce__(self):       # a ref passed as an argument arrives as its value, as in Ray
        return pickle.loads, (pickle.dumps(self.fetch()),)


class Method:
    def __init__(self, actor, name):
        self.actor, self.name = actor, name

    def remote(self, *args):
        ref = ObjectRef(actor=self.actor, call=(self.name, cloudpickle.dumps(args)))
        self.actor.queue.append(ref)
        return ref


class Actor:
    def __init__(self, cls, args, node):
        self.obj, self.node, self.dead, self.queue = cls(*args), node, False, []

    def _run_through(self, ref):
        while self.queue:
            first = self.queue.pop(0)
            first.execute()
            if first is ref:
                return

    def _invoke(self, name, payload):
        if self.dead:
            raise ray.exceptions.ActorDiedError()
        args = cloudpickle.loads(payload)
        if name == "node_id":
            return self.node
        if name == "__ray_call__":
            return None
        return getattr(self.obj, name)(*args)

    def __getattr__(self, name):
        if name.startswith("__") and name != "__ray_call__":
            raise AttributeError(name)
        return Method(self, name)


class FakeRay:
    """``import ray`` for RayExecutor: ``nodes`` nodes of one CPU each; actors go to the live node with the
    fewest live actors (Ray's SPREAD)."""

    exceptions = ray.exceptions
    __spec__ = importlib.util.find_spec("ray")

    def __init__(self, nodes: int = 3):
        self.alive = {f"node{i}": True for i in range(nodes)}
        self.actors: list[Actor] = []

    def is_initialized(self):
        return True

    def cluster_resources(self):
        return {"CPU": float(sum(self.alive.values()))}

    def nodes(self):
        return [{"NodeID": n, "Alive": a, "Resources": {"CPU": 1.0}} for n, a in self.alive.items()]

    def remote(self, **_):
        fake = self

        class Options:
            def __init__(self, cls):
                self.cls = cls

            def options(self, **_):
                return self

            def remote(self, *args):
                load = {n: 0 for n, a in fake.alive.items() if a}
                for actor in fake.actors:
                    if not actor.dead and actor.node in load:
                        load[actor.node] += 1
                actor = Actor(self.cls, args, min(load, key=lambda n: (load[n], n)))
                fake.actors.append(actor)
                return actor
        return Options

    def put(self, value):
        return ObjectRef(value=pickle.dumps(value))

    def get(self, refs, timeout=None):
        return [r.fetch() for r in refs] if isinstance(refs, list) else refs.fetch()

    def kill(self, actor):
        actor.dead = True

    def remove_node(self, node: str):
        self.alive[node] = False
        for actor in self.actors:
            if actor.node == node:
                actor.dead = True

    def shutdown(self):
        pass
