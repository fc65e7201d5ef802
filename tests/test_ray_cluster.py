"""executor=ray on a simulated multi-node Ray cluster (#69): clients are spread over the nodes, a client
actor is killed while its call of round 1 is in flight and a worker node is removed while its call of
round 2 is, and the run still ends with the metrics of an undisturbed run; a fault that outlasts
executor.max_retries gives an error naming the clients. docs/scaling.md ("When an actor or a node dies").

One cluster (``ray.cluster_utils.Cluster``: a head with no CPUs for actors and three worker nodes of one
CPU each) serves the slow tests; each run connects to it through ``executor.address``. The fast tests run
the same faults against tests/fake_ray.py (Ray's semantics in this process) to guard the executor's
logic in the default suite."""
from __future__ import annotations

import json
import sys

import pytest

from tests.test_scaling import CORA_FEDAVG, HAS_RAY, summary

pytestmark = pytest.mark.skipif(not HAS_RAY, reason="ray is not installed (pip install -e '.[ray]')")

STORE = 100 * 2**20       # object store per node: the runs ship a few MB
# GCS notices a removed node within ~1.5 s instead of the default ~30 s
FAST_HEALTH_CHECK = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500,
                     "health_check_failure_threshold": 3}


@pytest.fixture(scope="module")
def cluster():
    import ray
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "object_store_memory": STORE,
                                                      "_system_config": FAST_HEALTH_CHECK})
    try:
        workers = [c.add_node(num_cpus=1, object_store_memory=STORE) for _ in range(3)]
        c.wait_for_nodes()
        yield c, workers
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.shutdown()


@pytest.fixture
def one_thread():
    """torch at 1 thread, as in the actors (and as tests/fake_ray.py's in-process actors leave it), restored after."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)      # the actors run torch with 1 thread: compare at equal thread counts
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def executors(monkeypatch):
    """Every RayExecutor the runs make, with the node of each client as it was at shutdown."""
    from fgx.federation.ray_executor import RayExecutor

    made = []
    init, shutdown = RayExecutor.__init__, RayExecutor.shutdown

    def spy_init(self, params=None):
        init(self, params)
        made.append(self)

    def spy_shutdown(self):
        self.nodes_at_end = self.client_nodes() if self._ray is not None else {}
        shutdown(self)

    monkeypatch.setattr(RayExecutor, "__init__", spy_init)
    monkeypatch.setattr(RayExecutor, "shutdown", spy_shutdown)
    return made


def inject(monkeypatch, faults, slot=None, once=True):
    """Make RayExecutor._submit deliver ``faults[round](executor, actor index)`` right after it submits a
    call of that round: the round's first call (``once``) or every call, to actor ``slot`` only when it
    is given. The actor is first kept busy for a few seconds, so the fault lands while the call waits in
    its queue and never after its result is back: mid-round by construction, not by timing luck."""
    from fgx.federation.ray_executor import RayExecutor

    submit = RayExecutor._submit
    fired = []

    def faulty(self, at, fn, jobs, shared_args):
        fault = faults.get(self.round)
        if fault is None or (once and self.round in fired) or slot not in (None, at):
            return submit(self, at, fn, jobs, shared_args)
        fired.append(self.round)
        self._actors[at].__ray_call__.remote(lambda actor, s: __import__("time").sleep(s), 3.0)
        ref = submit(self, at, fn, jobs, shared_args)
        fault(self, at)
        return ref

    monkeypatch.setattr(RayExecutor, "_submit", faulty)
    return fired


def kill_actor(executor, slot):
    executor._ray.kill(executor._actors[slot])


def losses(run_dir):
    return [r["train_loss"] for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())]


def same_metrics(disturbed, undisturbed) -> None:
    local, remote = summary(undisturbed), summary(disturbed)
    assert remote["status"] == "completed" and remote["components"]["executor"] == "ray"
    for key in ("final", "final_pooled", "per_client", "best", "best_client", "total_bytes"):
        assert remote[key] == local[key], key
    assert losses(disturbed) == losses(undisturbed)


@pytest.mark.slow
def test_a_killed_actor_and_a_removed_node_leave_the_metrics_of_an_undisturbed_run(
        cluster, run_fgx, data_root, one_thread, executors, monkeypatch):
    c, workers = cluster
    cfg = [*CORA_FEDAVG, "rounds=3", f"data_dir={data_root}"]
    undisturbed = run_fgx(*cfg)
    removed = []

    def remove_node(executor, slot):
        node = next(w for w in workers if w.node_id == executor._nodes[slot])
        c.remove_node(node)
        removed.append(node.node_id)

    fired = inject(monkeypatch, {1: kill_actor, 2: remove_node})
    disturbed = run_fgx(*cfg, "executor=ray", f"executor.address={c.address}")
    assert fired == [1, 2]

    same_metrics(disturbed, undisturbed)

    (ex,) = executors
    killed, lost_node = ex.recoveries          # one recovery per fault, each in the round it hit
    assert (killed["round"], lost_node["round"]) == (1, 2)
    assert killed["cause"].startswith("ActorDiedError") and killed["recreated"] and killed["rerun"]
    # the removed node's actor: its clients went to the actors left on the two surviving nodes
    # Ray says ActorDiedError ("its node has died") or, when the actor's socket closes first, ActorUnavailableError
    assert lost_node["lost_node"] == removed[0] and lost_node["cause"].startswith(("ActorDiedError",
                                                                                   "ActorUnavailableError"))
    assert not lost_node["recreated"] and lost_node["rerun"] == lost_node["clients"]
    assert removed[0] not in lost_node["new_nodes"] and removed[0] not in ex.nodes_at_end.values()
    # clients really ran on several nodes: all three workers before the removal, the two left after it
    assert len(ex.nodes_used) == 3 and len(set(ex.nodes_at_end.values())) == 2
    assert sorted(ex.nodes_at_end) == [0, 1, 2, 3]
    log = (disturbed / "fgx.log").read_text()
    assert "lost in round 1: ActorDiedError" in log and "lost in round 2: Actor" in log


@pytest.mark.slow
def test_a_fault_that_outlasts_max_retries_is_an_error_naming_the_clients(
        cluster, run_fgx, data_root, one_thread, executors, monkeypatch, tiny_cfg):
    c, _ = cluster
    fired = inject(monkeypatch, {1: kill_actor}, slot=0, once=False)   # round 1's call to actor 0 and its retry
    run = run_fgx(*tiny_cfg, "partitioner.num_clients=4", "executor=ray", f"executor.address={c.address}",
                  "executor.max_retries=1", expect_rc=1)
    s = summary(run)
    (ex,) = executors
    assert s["status"] == "failed" and s["error"].startswith("ClientsLostError")
    assert f"clients {ex.recoveries[0]['rerun']} could not be run in round 1" in s["error"]
    assert "lost 2 times" in s["error"] and "executor.max_retries=1" in s["error"]
    assert "ActorDiedError: The actor died" in s["error"]
    assert fired == [1, 1] and len(ex.recoveries) == 1 and ex._actors == []     # one recovery, then no actor left behind


@pytest.fixture
def fake_ray(monkeypatch):
    from tests.fake_ray import FakeRay

    fake = FakeRay(nodes=3)
    monkeypatch.setitem(sys.modules, "ray", fake)
    return fake


def test_recovery_gives_the_undisturbed_metrics_on_a_simulated_ray(
        fake_ray, run_fgx, tiny_cfg, one_thread, executors, monkeypatch):
    """The slow test's faults (an actor killed in round 1, a node removed in round 2) against tests/fake_ray.py."""
    cfg = [*tiny_cfg, "partitioner.num_clients=4", "seed=1"]
    undisturbed = run_fgx(*cfg)
    removed = []

    def remove_node(executor, slot):
        removed.append(executor._nodes[slot])
        fake_ray.remove_node(removed[-1])

    fired = inject(monkeypatch, {1: kill_actor, 2: remove_node})
    disturbed = run_fgx(*cfg, "executor=ray")
    assert fired == [1, 2]
    same_metrics(disturbed, undisturbed)
    (ex,) = executors
    killed, lost_node = ex.recoveries
    assert (killed["round"], lost_node["round"]) == (1, 2) and killed["recreated"] and not lost_node["recreated"]
    assert killed["rerun"] and lost_node["rerun"] == lost_node["clients"] and lost_node["lost_node"] == removed[0]
    assert len(ex.nodes_used) == 3 and removed[0] not in ex.nodes_at_end.values()
    assert len(set(ex.nodes_at_end.values())) == 2 and sorted(ex.nodes_at_end) == [0, 1, 2, 3]


def test_max_retries_bounds_the_recoveries_on_a_simulated_ray(fake_ray, run_fgx, tiny_cfg, one_thread, executors,
                                                                monkeypatch):
    fired = inject(monkeypatch, {1: kill_actor}, slot=0, once=False)
    run = run_fgx(*tiny_cfg, "partitioner.num_clients=4", "executor=ray", "executor.max_retries=2", expect_rc=1)
    s = summary(run)
    (ex,) = executors
    assert fired == [1, 1, 1] and len(ex.recoveries) == 2
    assert s["error"].startswith(f"ClientsLostError: executor=ray: clients {ex.recoveries[0]['rerun']} could not "
                                 "be run in round 1: their actors were lost 3 times in this call "
                                 "(executor.max_retries=2); last cause: ActorDiedError")
