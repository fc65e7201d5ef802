"""executor=ray on a simulated multi-node Ray cluster (#69): clients are spread over the nodes, a client
actor is killed while its call of round 1 is in flight and a worker node is removed while its call of
round 2 is, and the run still ends with the metrics of an undisturbed run; a fault that outlasts
executor.max_retries gives an error naming the clients. docs/scaling.md ("When an actor or a node dies").

One cluster (``ray.cluster_utils.Cluster``: a head with no CPUs for actors and three worker nodes of one
CPU each) serves the module; each run connects to it through ``executor.address``."""
from __future__ import annotations

import json

import pytest

from tests.test_scaling import CORA_FEDAVG, HAS_RAY, summary

pytestmark = [pytest.mark.skipif(not HAS_RAY, reason="ray is not installed (pip install -e '.[ray]')"),
              pytest.mark.slow]

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

    local, remote = summary(undisturbed), summary(disturbed)
    assert remote["status"] == "completed" and remote["components"]["executor"] == "ray"
    for key in ("final", "final_pooled", "per_client", "best", "best_client", "total_bytes"):
        assert remote[key] == local[key], key
    assert losses(disturbed) == losses(undisturbed)

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
