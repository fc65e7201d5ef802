"""CE-FedGNN: switches, embedding routing, privacy of what crosses the channel."""
import json

import numpy as np
import pytest
import torch
from scipy import stats

from fgx.cli import main
from fgx.federation.channel import payload_tensors

TINY_CE = ["dataset=csbm", "dataset.num_nodes=300", "dataset.num_features=16", "partitioner=random",
           "partitioner.num_clients=3", "rounds=3", "eval_every=3", "model.hidden=16", "algorithm=ce_fedgnn",
           "algorithm.local_steps=3", "algorithm.batch_size=32"]
# metric-DP's ε covers the embeddings only: the paper's σ1/σ2 noise on update and G is not accounted
METRIC_DP_PUBLIC = "privacy.public_messages=[update,grad_estimator]"


def rows(d):
    return [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]


def test_ce_fedgnn_runs_and_ledger_separates_w_g_embeddings(run_fgx):
    d = run_fgx(*TINY_CE)
    comm = json.loads((d / "comm.json").read_text())
    kinds = set(comm["totals"])
    assert {"update", "grad_estimator", "embeddings", "embeddings_routed", "global_weights"} <= kinds
    assert comm["totals"]["update"] == comm["totals"]["grad_estimator"]  # G has W's shape
    assert "raw_features" not in kinds


def test_no_sharing_sends_no_embeddings(run_fgx):
    d = run_fgx(*TINY_CE, "algorithm.embedding_sharing=none")
    assert "embeddings" not in json.loads((d / "comm.json").read_text())["totals"]


def test_sharing_layer_zero_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match="share_layers"):
        main(["run", *TINY_CE, "algorithm.share_layers=[0,1]"])
    # raw layer-0 rows are refused before any work (no run directory) unless the features are public
    with pytest.raises(SystemExit, match="algorithm.remote_layer0='raw' .*does not declare its node features public"):
        main(["run", *TINY_CE, "algorithm.remote_layer0=raw", f"hydra.run.dir={tmp_path / 'r'}"])
    assert not (tmp_path / "r").exists()


def _capture(monkeypatch):
    from fgx.federation import channel as chmod
    seen = []
    orig = chmod.Channel.send

    def send(self, kind, payload, src, dst, round):
        out = orig(self, kind, payload, src, dst, round)
        seen.append((kind, src, dst, round, out))
        return out

    monkeypatch.setattr(chmod.Channel, "send", send)
    return seen



def test_no_raw_feature_crosses_the_channel(run_fgx, monkeypatch):
    from fgx.data.base import DataEnv
    from fgx.data.csbm import CsbmParams, load_csbm
    import logging
    seen = _capture(monkeypatch)
    run_fgx(*TINY_CE, "algorithm.share_layers=[1,2]")
    x = load_csbm(CsbmParams(num_nodes=300, num_features=16), DataEnv(None, 0, logging.getLogger())).data.x
    raw = {tuple(np.round(r.numpy(), 5)) for r in x}
    assert seen
    for kind, *_ , payload in seen:
        for t in payload_tensors(payload):
            if t.is_floating_point() and t.dim() == 2 and t.size(-1) == 16:
                assert not any(tuple(np.round(r.numpy(), 5)) in raw for r in t), kind


def test_receivers_use_exactly_the_noisy_release(run_fgx, monkeypatch):
    seen = _capture(monkeypatch)
    run_fgx(*TINY_CE, "privacy=metric_dp", "privacy.sigma0=0.5", "privacy.k=5", METRIC_DP_PUBLIC)
    released = {}
    for kind, src, dst, r, p in seen:
        if kind == "embeddings":
            for gid, v in zip(p["ids"].tolist(), p["values"]):
                released[(r, p["layer"] if "layer" in p else 1, gid)] = v
    assert released
    checked = 0
    for kind, src, dst, r, p in seen:
        if kind == "embeddings_routed":
            for gid, v in zip(p["ids"].tolist(), p["values"]):
                key = (r, 1, gid)
                if key in released:
                    assert torch.equal(v, released[key])
                    checked += 1
    assert checked > 0


def test_embedding_noise_has_the_configured_sigma():
    from types import SimpleNamespace

    from fgx.privacy.metric_dp import MetricDP, MetricDPParams
    mech = MetricDP(MetricDPParams(sigma0=0.7))
    mech.bind(SimpleNamespace(seed=0))
    vals = torch.randn(4000, 8)
    out = mech.release("embeddings", {"layer": 1, "ids": torch.arange(4000), "values": vals}, src=0, round=1)
    noise = (out["values"] - vals / vals.norm(dim=-1, keepdim=True)).reshape(-1).numpy()
    # Kolmogorov-Smirnov against N(0, 0.7²): a wrong σ (0.6 or 0.8) is rejected at this sample size
    assert stats.kstest(noise, "norm", args=(0, 0.7)).pvalue > 1e-3
    assert stats.kstest(noise, "norm", args=(0, 0.6)).pvalue < 1e-6
    assert stats.kstest(noise, "norm", args=(0, 0.8)).pvalue < 1e-6
    assert mech.releases[0] == 1 and len(mech.releases) == 4000


def test_metric_dp_run_reports_the_epsilon_table(run_fgx):
    d = run_fgx(*TINY_CE, "privacy=metric_dp", "privacy.k=5", METRIC_DP_PUBLIC)
    priv = json.loads((d / "privacy.json").read_text())
    assert priv["mechanism"] == "metric_dp" and len(priv["table"]) == 5
    assert set(priv["rho"]) == {"50", "90", "95", "99", "100"}
    s = json.loads((d / "summary.json").read_text())
    assert s["privacy"]["epsilon_p90"] == pytest.approx(priv["epsilon"]["value"])
    assert (s["privacy"]["mechanism"], s["privacy"]["rho"], s["privacy"]["releases"]) == (
        "metric_dp", priv["rho"]["90"], priv["steps_used"])
    assert priv["epsilon"]["percentile"] == 90 and priv["epsilon"]["rho"] == priv["rho"]["90"]
    from fgx.privacy.metric_dp_accounting import metric_dp_epsilon
    assert priv["epsilon"]["value"] == pytest.approx(
        metric_dp_epsilon(priv["rho"]["90"], 1.0, priv["steps_used"], 1e-4), rel=1e-9)


def test_metric_dp_needs_an_embedding_algorithm(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match=r"'metric_dp' covers \['embeddings'\], not \['update'\], which 'fedavg' sends"):
        main(["run", "algorithm=fedavg", "privacy=metric_dp"])
    with pytest.raises(SystemExit, match="releases no embeddings"):
        main(["run", "algorithm=fedavg", "privacy=metric_dp", "privacy.public_messages=[update]"])


def test_ce_fedgnn_resume_gives_the_same_metrics(run_fgx):
    full = rows(run_fgx(*TINY_CE, "rounds=4", "eval_every=2"))
    part = run_fgx(*TINY_CE, "rounds=2", "eval_every=2")
    assert main(["run", *TINY_CE, "rounds=4", "eval_every=2", "resume=true", f"hydra.run.dir={part}"]) == 0
    assert [(r["round"], r["split"], r["mean"]) for r in rows(part)] == \
        [(r["round"], r["split"], r["mean"]) for r in full]


def test_attribute_inference_attack_is_hurt_by_noise(run_fgx):
    def aia(*extra):
        d = run_fgx(*TINY_CE, "algorithm.aia_targets=8", "algorithm.aia_steps=150", "algorithm.aia_lr=0.05", *extra)
        return json.loads((d / "attack_aia.jsonl").read_text().splitlines()[-1])
    clean = aia("privacy=metric_dp", "privacy.sigma0=0.001", "privacy.k=5", METRIC_DP_PUBLIC)
    noisy = aia("privacy=metric_dp", "privacy.sigma0=5.0", "privacy.k=5", METRIC_DP_PUBLIC)
    assert clean["targets"] == noisy["targets"] == 8
    assert clean["baseline_nn1pct_mse"] == pytest.approx(noisy["baseline_nn1pct_mse"])
    assert noisy["mse"] > clean["mse"]


@pytest.mark.parametrize("extra", [
    [],
    ["dataset=aml_tiny", "partitioner=by_bank", "partitioner.num_clients=2", "model=gine", "model.hidden=8",
     "algorithm.remote_layer0=raw", "dataset.num_nodes=null"],
])
def test_ce_fedgnn_on_sampled_subgraphs(run_fgx, extra):
    args = [a for a in TINY_CE if not (extra and a.split("=")[0] in ("dataset", "dataset.num_nodes",
                                                                       "dataset.num_features", "partitioner",
                                                                       "partitioner.num_clients", "model.hidden"))]
    extra = [a for a in extra if a != "dataset.num_nodes=null"]
    d = run_fgx(*args, *extra, "algorithm.fanouts=[5,5]")
    comm = json.loads((d / "comm.json").read_text())
    assert json.loads((d / "summary.json").read_text())["status"] == "completed"
    assert comm["totals"]["embeddings"] > 0


# -- fidelity to Algorithm 1 (issue 20) ----------------------------------------------------------------
AML = ["dataset=aml_tiny", "dataset.scale=0.25", "partitioner.num_clients=2", "model.hidden=8", "rounds=2",
       "eval_every=2", "algorithm.local_steps=3", "algorithm.batch_size=16", "algorithm.fanouts=[3,3]"]


@pytest.fixture(scope="module")
def aml_data(tmp_path_factory):
    """One generated aml_tiny (scale 0.25) for the tests of this module."""
    return f"data_dir={tmp_path_factory.mktemp('aml')}"


def _grab(monkeypatch, cls_name="CEFedGNN"):
    import fgx.algorithms.ce_fedgnn as ce
    holder = {}
    orig = getattr(ce, cls_name).setup

    def setup(self):
        orig(self)
        holder["algo"] = self
    monkeypatch.setattr(getattr(ce, cls_name), "setup", setup)
    return holder


def test_a_node_updated_only_at_layer_one_uploads_only_layer_one(run_fgx, monkeypatch, aml_data):
    """Per-layer update flags: a boundary node reached at hop 1 of a step's sample has a complete
    neighbourhood for layer 1 only; it uploads its layer-1 state and nothing at layer 2. The server
    routes each round only the rows uploaded that round."""
    import fgx.algorithms.ce_fedgnn as ce
    uploads = []
    orig = ce._upload

    def upload(c, global_state, share):
        out = orig(c, global_state, share)
        uploads.append(({l: c.updated[l - 1].clone() for l in share}, c.boundary.clone(), c.view.global_ids.clone(),
                        [h.clone() if h is not None else None for h in c.hbar_init], out[2]))
        return out
    monkeypatch.setattr(ce, "_upload", upload)
    seen = _capture(monkeypatch)
    run_fgx(*AML, aml_data)
    only_layer1 = 0
    for updated, boundary, gids, init, emb in uploads:
        got = {e["layer"]: set(e["ids"].tolist()) for e in emb}
        for layer, upd in updated.items():
            want = boundary[upd[boundary]]
            assert got.get(layer, set()) == set(gids[want].tolist())
            assert bool(init[layer - 1][want].all())          # never an uninitialised state
        l1 = boundary[updated[1][boundary] & ~updated[2][boundary]]
        only_layer1 += l1.numel()
        assert not set(gids[l1].tolist()) & got.get(2, set())
        assert set(gids[l1].tolist()) <= got.get(1, set())
    assert only_layer1 > 0          # the case exists in these runs (else the test would prove nothing)
    sent = {}
    for kind, src, dst, r, p in seen:
        if kind == "embeddings":
            sent.setdefault((r, p["layer"]), set()).update(p["ids"].tolist())
    routed = [(r, p["layer"], set(p["ids"].tolist())) for kind, src, dst, r, p in seen if kind == "embeddings_routed"]
    assert routed and all(ids <= sent[(r, layer)] for r, layer, ids in routed)


def test_ema_sgd_with_beta_one_is_plain_sgd_step_for_step(run_fgx, monkeypatch, aml_data):
    """W_k = W_{k-1} - lr * g_k exactly with beta = 1 (G is the fresh gradient); with beta = 0.9 not."""
    import fgx.algorithms.ce_fedgnn as ce
    holder = _grab(monkeypatch)
    run_fgx(*AML, aml_data, "rounds=1")
    algo = holder["algo"]
    c = algo.clients[0]
    params = dict(c.model.named_parameters())
    for beta, exact in ((1.0, True), (0.9, False)):
        algo.params.beta, algo.params.lr, algo.params.local_steps = beta, 0.05, 3
        log = {n: [] for n in params}
        hooks = [prm.register_hook(lambda g, n=n, prm=prm: log[n].append((prm.detach().clone(), g.clone())))
                 for n, prm in params.items()]
        start = {k: v.clone() for k, v in algo.global_model.state_dict().items()}
        G0 = {k: torch.randn_like(v) for k, v in algo.global_G.items()}   # a non-zero incoming G
        ce.local_round(c, algo.params, start, G0, 123, algo.share, False)
        for h in hooks:
            h.remove()
        stepped = [n for n in params if len(log[n]) == 3]
        assert len(stepped) > len(params) // 2
        ok = True
        for n in stepped:
            seq = [w for w, _ in log[n]] + [params[n].detach()]
            for k, (_, g) in enumerate(log[n]):
                ok &= torch.equal(seq[k + 1], seq[k] - 0.05 * g)
        assert ok == exact


def test_no_sharing_equals_the_w_only_fedavg_path(run_fgx, aml_data):
    """embedding_sharing=none (beta = 1) and fedavg_w_only train identically; FedAvg sends only W."""
    a = run_fgx(*AML, aml_data, "algorithm.embedding_sharing=none", "algorithm.beta=1.0")
    b = run_fgx(*AML, aml_data, "algorithm=fedavg_w_only")
    assert [r["mean"] for r in rows(a)] == [r["mean"] for r in rows(b)]
    ca, cb = (json.loads((d / "comm.json").read_text())["totals"] for d in (a, b))
    assert "grad_estimator" in ca and "grad_estimator" not in cb and "global_grad_estimator" not in cb
    assert "embeddings" not in cb and cb["update"] == ca["update"]
    assert sum(cb.values()) < sum(ca.values())


def test_rho_is_measured_over_all_nodes_under_the_final_model(run_fgx, monkeypatch, aml_data):
    holder = _grab(monkeypatch)
    d = run_fgx(*AML, aml_data, "privacy=metric_dp", "privacy.k=5", METRIC_DP_PUBLIC)
    priv = json.loads((d / "privacy.json").read_text())
    n_owned = sum(c.n_own for c in holder["algo"].clients)
    assert priv["rho_population"]["nodes"] == n_owned > priv["releases_per_node"]["nodes"]
    from fgx.privacy.metric_dp_accounting import knn_distance_percentiles
    emb = holder["algo"].node_embeddings(seed=0)
    assert priv["rho"]["90"] == pytest.approx(knn_distance_percentiles(emb.numpy(), k=5)["rho"][90])
    b = json.loads((run_fgx(*AML, aml_data, "privacy=metric_dp", "privacy.k=5", METRIC_DP_PUBLIC,
                            "privacy.rho_population=boundary_only") / "privacy.json").read_text())
    assert b["rho_population"]["nodes"] == b["releases_per_node"]["nodes"]


def test_dp_fedavg_with_ce_fedgnn_is_refused_before_any_work(tmp_path, monkeypatch):
    """dp_fedavg's ε covers model updates only; CE-FedGNN also releases G and embeddings."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match="dp_fedavg") as e:
        main(["run", "algorithm=ce_fedgnn", "privacy=dp_fedavg"])
    assert "embeddings" in str(e.value) and "grad_estimator" in str(e.value)
    assert not (tmp_path / "outputs").exists()


def test_metric_dp_state_survives_a_checkpoint():
    """Release counts (they set ε), the last releases (the ρ population) and the noise stream all
    come back from a checkpoint (torch.save/load(weights_only=True), as the trainer does)."""
    import io
    from types import SimpleNamespace

    from fgx.privacy.metric_dp import MetricDP, MetricDPParams

    def fresh():
        m = MetricDP(MetricDPParams(sigma0=0.5))
        m.bind(SimpleNamespace(seed=1))
        return m

    def release(m, ids):
        vals = torch.arange(len(ids) * 4, dtype=torch.float).reshape(len(ids), 4) + 1
        return m.release("embeddings", {"layer": 1, "ids": torch.tensor(ids), "values": vals}, src=0, round=1)["values"]

    before = fresh()
    release(before, [3, 7])
    release(before, [7])
    buf = io.BytesIO()
    torch.save(before.state_dict(), buf)
    buf.seek(0)
    after = fresh()
    after.load_state_dict(torch.load(buf, weights_only=True))
    assert after.releases == before.releases == {3: 1, 7: 2}
    assert sorted(after.last_released) == [3, 7]
    assert all(torch.equal(after.last_released[i], before.last_released[i]) for i in (3, 7))
    expected = release(before, [3])
    assert not torch.equal(release(fresh(), [3]), expected)
    assert torch.equal(release(after, [3]), expected)
    empty = fresh()
    empty.load_state_dict(fresh().state_dict())          # a checkpoint before any release
    assert empty.releases == {} and empty.last_released == {}


def test_attack_baseline_is_the_distance_to_the_nearest_percent_of_the_other_nodes():
    """App. E's yardstick on hand-placed points: 300 nodes on a line, 2 features; 1 % is 3 nodes (a
    count of nodes, not of features), the target itself excluded, distances per feature."""
    from fgx.privacy.attacks import nearest_percent_baseline
    x = torch.stack([torch.arange(300, dtype=torch.float), torch.zeros(300)], dim=1)
    # node 100's nearest others: 99 and 101 (squared distance 1), then 98 or 102 (4); per feature: / 2
    assert nearest_percent_baseline(x, torch.tensor([100]), 1.0) == pytest.approx((1 + 1 + 4) / 3 / 2)
    # node 0: 1, 2, 3 -> (1 + 4 + 9) / 3 / 2; the mean over targets
    assert nearest_percent_baseline(x, torch.tensor([0, 100]), 1.0) == pytest.approx((14 / 6 + 1) / 2)
    assert nearest_percent_baseline(x[:50], torch.tensor([10]), 1.0) == pytest.approx(1 / 2)   # at least one


@pytest.mark.parametrize("released", [0, 1])
def test_metric_dp_report_without_two_released_nodes_has_no_epsilon(released):
    """ρ is a k-NN distance between released embeddings: with fewer than two there is none, and the
    report says so instead of inventing an ε."""
    from types import SimpleNamespace

    from fgx.privacy.metric_dp import MetricDP, MetricDPParams
    m = MetricDP(MetricDPParams(sigma0=0.5, rho_population="boundary_only"))
    m.bind(SimpleNamespace(seed=0))
    for _ in range(released):
        m.release("embeddings", {"layer": 1, "ids": torch.tensor([4]), "values": torch.ones(1, 3)}, src=0, round=1)
    out = m.report()
    assert out["epsilon"] is None and "fewer than 2 nodes" in out["note_epsilon"]
    assert out["releases_per_node"] == {"nodes": released, "min": released, "median": float(released), "max": released}


def test_metric_dp_clip_mode_shrinks_only_long_embeddings_and_noise_follows_the_run_seed():
    from types import SimpleNamespace

    from fgx.privacy.metric_dp import MetricDP, MetricDPParams

    def mech(seed, **kw):
        m = MetricDP(MetricDPParams(**kw))
        m.bind(SimpleNamespace(seed=seed))
        return m

    payload = {"layer": 1, "ids": torch.tensor([0, 1]), "values": torch.tensor([[0.3, 0.4], [3.0, 4.0]])}
    out = mech(0, sigma0=0.0, embedding_norm="clip", clip_embedding=1.0).release("embeddings", payload, src=0, round=1)
    assert torch.allclose(out["values"], torch.tensor([[0.3, 0.4], [0.6, 0.8]]))   # norm 0.5 kept, 5 cut to 1
    # the noise comes from the mechanism's own generator, seeded by the run: the global RNG does not matter
    torch.manual_seed(0)
    a = mech(5, sigma0=1.0).release("embeddings", payload, src=0, round=1)["values"]
    torch.manual_seed(1)
    b = mech(5, sigma0=1.0).release("embeddings", payload, src=0, round=1)["values"]
    c = mech(6, sigma0=1.0).release("embeddings", payload, src=0, round=1)["values"]
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_metric_dp_headline_percentile_must_be_one_of_the_measured():
    from fgx.config import ConfigError
    from fgx.privacy.metric_dp import MetricDPParams
    with pytest.raises(ConfigError) as err:
        MetricDPParams(headline_percentile=80).validate("privacy")
    assert (err.value.key, err.value.value) == ("privacy.headline_percentile", 80)
    assert "one of percentiles" in str(err.value)


def test_update_layers_reach_upstream_from_the_seeds_of_a_step():
    """Layer i is updated for the owned nodes within L-1-i hops upstream of the step's seeds; on an edge
    task the seeds are the owned endpoints of the step's edges."""
    from types import SimpleNamespace

    from fgx.algorithms.ce_fedgnn import _update_layers

    # owned nodes 0..4 on a directed path 0 -> 1 -> 2 -> 3 -> 4; node 5 is a halo node
    path = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])
    edges = torch.tensor([[3, 0, 5], [4, 1, 2]])        # the task's edges (edge task)
    c = SimpleNamespace(view=SimpleNamespace(x=torch.zeros(6, 2), edge_index=edges), n_own=5,
                        owned_mp_edges=path, task="edge")
    masks = _update_layers(c, torch.tensor([0, 2]), 3)     # seed edges 3->4 and 5->2: owned seeds 2, 3, 4
    assert [m.nonzero().view(-1).tolist() for m in masks] == [[0, 1, 2, 3, 4], [1, 2, 3, 4], [2, 3, 4]]
    c.task = "node"
    masks = _update_layers(c, torch.tensor([4]), 2)
    assert [m.nonzero().view(-1).tolist() for m in masks] == [[3, 4], [4]]
    assert all(m.all() for m in _update_layers(c, None, 2))


def test_attribute_inference_models_the_released_normalisation(run_fgx, monkeypatch):
    """Under metric-DP with embedding_norm=normalize the attacker's embedding map normalises too, as
    the release did: it compares like with like."""
    import fgx.privacy.attacks as attacks

    seen = []

    def spy(embed, released, init, steps, lr):
        seen.append((float(embed(init).detach().norm()), float(released.norm())))
        return init
    monkeypatch.setattr(attacks, "reconstruct_features", spy)
    run_fgx(*TINY_CE, "algorithm.aia_targets=4", "privacy=metric_dp", "privacy.sigma0=0.001", "privacy.k=5",
            METRIC_DP_PUBLIC)
    assert len(seen) == 4
    for attacker, released in seen:
        assert attacker == pytest.approx(1.0, abs=1e-5) and released == pytest.approx(1.0, abs=0.05)


def test_metric_dp_report_names_its_parameters_fixed_steps_and_queries_and_flags_clipping():
    from types import SimpleNamespace

    from fgx.privacy.metric_dp import MetricDP, MetricDPParams
    m = MetricDP(MetricDPParams(sigma0=0.5, embedding_norm="clip", steps="fixed", fixed_steps=7, rho_queries=5,
                                rho_population="boundary_only"))
    m.bind(SimpleNamespace(seed=3))
    g = torch.Generator().manual_seed(0)
    m.release("embeddings", {"layer": 1, "ids": torch.arange(12), "values": torch.randn(12, 3, generator=g)},
              src=0, round=1)
    out = m.report()
    p = m.params
    assert out["params"] == {"sigma0": 0.5, "sigma1": p.sigma1, "sigma2": p.sigma2, "embedding_norm": "clip",
                             "clip_embedding": p.clip_embedding, "clip_model": p.clip_model, "delta": p.delta,
                             "k": p.k, "orders": p.orders}
    assert out["steps_used"] == 7 and out["epsilon"]["releases"] == 7       # steps=fixed, not the 1 release
    assert out["rho_population"]["queries"] == 5
    assert out["note"] == ("embeddings were clipped, not normalised: the ε below assumes L2-normalised "
                           "embeddings (Theorem 3.6) and is an interpretation, not a guarantee")


def test_metric_dp_measures_rho_on_the_final_embeddings_with_the_run_seed():
    from types import SimpleNamespace

    from fgx.privacy.metric_dp import MetricDP, MetricDPParams
    seeds = []
    algo = SimpleNamespace(node_embeddings=lambda seed: seeds.append(seed) or torch.zeros(3, 2))
    m = MetricDP(MetricDPParams(sigma0=0.5, rho_population="all_nodes"))
    m.bind(SimpleNamespace(seed=11))
    m.finish(algo)
    assert seeds == [11] and m.final_embeddings.shape == (3, 2)


def test_ce_fedgnn_weight_decay_adds_lambda_times_the_weight_to_each_gradient(run_fgx):
    """algorithm.weight_decay: each parameter's gradient gets + λ·W before it enters G (ema_sgd), so a
    run with it trains to other losses than one without, and stays finite (biases start at 0: a
    division by the weight would not; seed-4 mutation sample)."""
    def losses(*extra):
        d = run_fgx(*TINY_CE, "rounds=2", "eval_every=1", *extra)
        rows = [json.loads(l) for l in (d / "metrics.jsonl").read_text().splitlines()]
        return [r["train_loss"] for r in rows if r.get("split") == "val"]

    plain, decayed = losses(), losses("algorithm.weight_decay=0.05")
    assert len(decayed) == 2 and all(np.isfinite(decayed))
    assert decayed != plain


def test_upload_sends_a_layer_in_which_exactly_one_boundary_node_moved():
    """_upload: a layer whose moved boundary nodes are exactly one still uploads that node's activated
    state; a layer where none moved sends nothing (seed-4 mutation sample: `numel() == 1` skipped it)."""
    import types

    import fgx.algorithms.ce_fedgnn as ce
    model = types.SimpleNamespace(state_dict=lambda: {"w": torch.ones(2)}, activate=lambda layer, x: 2 * x)
    hbar = torch.arange(10.0).view(5, 2)
    moved1 = torch.tensor([False, False, False, True, False])        # boundary node 3 moved at layer 1
    c = types.SimpleNamespace(model=model, boundary=torch.tensor([1, 3]), updated=[moved1, torch.zeros(5, dtype=torch.bool)],
                              hbar=[hbar, hbar], view=types.SimpleNamespace(global_ids=torch.arange(5) + 100),
                              G={"w": torch.zeros(2)})
    update, G, emb = ce._upload(c, {"w": torch.zeros(2)}, [1, 2])
    assert torch.equal(update["w"], torch.ones(2))
    assert len(emb) == 1 and emb[0]["layer"] == 1
    assert emb[0]["ids"].tolist() == [103] and torch.equal(emb[0]["values"], 2 * hbar[3:4])


def test_a_client_without_training_items_counts_once_in_the_train_items_average(run_fgx, monkeypatch):
    """weighting=train_items: a client with no training item gets weight 1 (max(n, 1), as CE-FedGNN had
    it from the start) in the update and G averages, not 0 (seed-4 mutation sample: at_least_one)."""
    import fgx.algorithms.base as base
    import fgx.algorithms.ce_fedgnn as ce
    real = base.num_train_items
    monkeypatch.setattr(base, "num_train_items", lambda s: 0 if s.cid == 0 else real(s))
    seen, orig = [], ce.weighted_average
    monkeypatch.setattr(ce, "weighted_average", lambda xs, w: seen.append(list(w)) or orig(xs, w))
    run_fgx(*TINY_CE, "algorithm.weighting=train_items")
    assert seen and all(w[0] == 1 and min(w[1:]) > 1 for w in seen)
