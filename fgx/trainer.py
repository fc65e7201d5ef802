"""The one trainer loop every algorithm runs in:

dataset -> partitioner -> clients -> algorithm (model, channel, privacy) -> rounds with evaluation
and checkpoints -> unlearning -> summary. Everything written goes through RunDir."""
from __future__ import annotations

import logging
import os
import random
import resource
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from fgx.config import ConfigError, Validated, config_fingerprint, default_data_dir, validate
from fgx.data.base import DataEnv, DataError
from fgx.data.checks import check_clients, check_graph
from fgx.diagnostics import Diagnostics
from fgx.divergence import DivergenceWatch, classification_cap, holds_nan
from fgx.federation.channel import Channel
from fgx.federation.context import Context
from fgx.local_work import describe as local_work
from fgx.loggers import make_logger
from fgx.metrics import (clients_skipped, grouped_classification_metrics, improves, metric_names,
                         mean_over_clients, minority_class, minority_counts)
from fgx.outputs import RunDir
from fgx.privacy.audit import attach as attach_audit, audited_name
from fgx.provenance import code_fingerprint, data_fingerprint, kernels, provenance, run_command
from fgx.reference import applies as reference_applies, reference
from fgx.privacy.base import algorithm_messages, coverage
from fgx.partition.base import build_clients, partition_stats
from fgx.progress import ACTIVITY, Progress
from fgx.resampling import StateItems

log = logging.getLogger("fgx")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)
    # multi-threaded CPU reductions (PyG's scatter) otherwise differ in the last bits from run to
    # run, and over many rounds that drift reaches the metrics' third decimal
    if "torch._inductor.config" in sys.modules:
        torch.use_deterministic_algorithms(True, warn_only=True)
    else:
        # the public call first imports torch._inductor (about a second of start-up) only to set
        # inductor's own flag; fgx compiles nothing, so the ATen flag it sets next is all it needs
        torch._C._set_deterministic_algorithms(True, warn_only=True)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        from fgx.config import ConfigError
        raise ConfigError("device", name, "'cpu' or 'auto' (no CUDA device is available here)")
    return torch.device(name)


def setup_logging(run_dir: Path) -> logging.Handler:
    log.setLevel(logging.INFO)
    log.propagate = False
    fh = logging.FileHandler(run_dir / "fgx.log")
    fh.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(fh)
    if not any(getattr(h, "_fgx_console", False) for h in log.handlers):
        ch = logging.StreamHandler(sys.stderr)
        ch.setFormatter(logging.Formatter("[fgx] %(message)s"))
        ch._fgx_console = True
        log.addHandler(ch)
    return fh


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def process_start_time() -> float | None:
    """When this process started (epoch seconds, 10 ms resolution), read from /proc on Linux; None
    elsewhere. Start-up (interpreter, imports, data, partition, setup) is measured from here."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


class Evaluator:
    """Per-client metrics on each split, their mean over clients (``skipped``: how many clients each mean left
    out, their value undefined), and the pooled values (every client's items as one set; not the server's
    model, which is `eval_model=global`); on a binary task also the pooled counts of flagged and
    minority items (``positives``, :func:`fgx.metrics.minority_counts`)."""

    def __init__(self, ctx: Context, data, params=None, metrics: list[str] | None = None,
                 main_metric: str | None = None):
        from fgx.config import EvalParams

        self.ctx = ctx
        self.params = params or EvalParams()
        info = ctx.info
        self.names = metric_names(metrics, info.num_classes, main_metric)
        self.task = info.task
        if info.task == "node" and getattr(data, "train_mask", None) is not None:
            self.minority = minority_class(data.y[data.train_mask], info.num_classes)
        elif info.task == "edge":
            self.minority = minority_class(data.edge_y[data.edge_train_mask], info.num_classes)
        elif info.task == "graph":
            self.minority = minority_class(data.graph_y[data.graph_train_mask], info.num_classes)
        else:
            self.minority = None

    def __call__(self, algo, local: bool = False, complete: bool = True, items: bool = False) -> dict[str, dict]:
        """Metrics of every client on the configured splits; ``local``: of each client's own model;
        ``complete`` False: the intermediate evaluation, on a fixed subset of items when
        ``eval.subset`` is set; ``items``: also each client's test items as fgx/resampling.py keeps them
        (scores, labels and global ids; a link task's pair scores; or an algorithm's per-item values) under
        ``test.items``."""
        from fgx.resampling import item_ids

        if self.task == "link":     # AUC, Hits@K and MRR of node pairs (fgx/link/evaluate.py)
            from fgx.link.evaluate import evaluate_link
            return evaluate_link(self.ctx, algo, self.params.splits, self.ctx.config.top.task.hits_k, local, items)
        out: dict[str, dict] = {}
        per = [algo.client_metrics(c) for c in self.ctx.clients]
        if per and per[0] is not None:
            # ranking/regression tasks: the algorithm computes its own per-client metrics, and may give the
            # per-item values they are means of (``_items``: (ids, {metric: values}) per split)
            kept = [{split: m.pop("_items", None) for split, m in p.items()} for p in per]
            for split in per[0]:
                pc = [p[split] for p in per]
                out[split] = {"mean": mean_over_clients(pc), "per_client": pc, "pooled": None,
                              "skipped": clients_skipped(pc)}
            if items and "test" in out and all(k.get("test") is not None for k in kept):
                out["test"]["items"] = [k["test"] for k in kept]
            return out
        preds = [self._predict(algo, c, complete, local) for c in self.ctx.clients]
        k = self.ctx.info.num_classes
        for split in preds[0]:
            scores = torch.cat([p[split][0] for p in preds])
            labels = torch.cat([p[split][1] for p in preds])
            client = torch.repeat_interleave(torch.arange(len(preds)), torch.tensor([p[split][1].numel() for p in preds]))
            # every client at once (one sort, a few bincounts), then the pooled values over all clients
            pc = grouped_classification_metrics(scores, labels, client, len(preds), k, self.minority, self.names)
            pooled = grouped_classification_metrics(scores, labels, torch.zeros_like(labels), 1, k, self.minority,
                                                    self.names)[0]
            out[split] = {"mean": mean_over_clients(pc), "per_client": pc, "pooled": pooled,
                          "skipped": clients_skipped(pc)}
            if k == 2:       # from the same scores: one argmax and a bincount, no second pass
                out[split]["positives"] = minority_counts(scores, labels, self.minority)
            if items and split == "test":
                e, cache = self.params, self.__dict__.setdefault("_item_ids", {})
                out[split]["items"] = [
                    (p[split][0], p[split][1], item_ids(algo, c, self.task, e.splits, None if complete else e.subset,
                                                        self.ctx.seed, p[split][1], cache=cache))
                    for c, p in zip(self.ctx.clients, preds)]
        return out


    def _predict(self, algo, client, complete: bool, local: bool = False) -> dict:
        e = self.params
        return algo.predict(client, local=local, splits=e.splits, subset=None if complete else e.subset,
                            batch_size=e.batch_size)

    def describe(self) -> dict:
        e = self.params
        return {"splits": list(e.splits), "final": "complete: every item of these splits on every client",
                "intermediate": "complete" if e.subset is None else
                f"a fixed random subset of at most {e.subset} items per split and client",
                "batch_size": e.batch_size, "inference": e.inference}


def _code_changed_since(summary: dict) -> list[str]:
    """How the fgx code here differs from the code an earlier run of this directory was made with
    (its summary's provenance); a run without a fingerprint counts as made with other code."""
    from fgx.provenance import code_changes

    prov = summary.get("provenance") or {}
    if not isinstance(prov.get("code"), dict):
        return ["no code fingerprint"]
    return code_changes(prov["code"], prov.get("commit"))


def run(cfg: DictConfig, run_dir: str | Path, multirun: bool = False) -> dict:
    """Run one job into ``run_dir``. Returns the summary; on failure summary.json says so (status
    failed, the error and its traceback) and the caller decides the exit code."""
    rd = RunDir(run_dir)
    fresh = _is_fresh(rd.path)
    handler = setup_logging(rd.path)
    t_start = time.time()
    summary: dict[str, Any] = {"status": "running", "run_dir": str(rd.path)}
    try:
        v = validate(cfg)
        prev = rd.file("summary.json")
        summary["config_sha"], summary["seed"] = config_fingerprint(cfg)[1], v.top.seed
        if v.top.resume and prev.exists():
            earlier = rd.read_json("summary.json")
            # a completed run's summary carries its code fingerprint; an interrupted run's does not yet,
            # and its checkpoint, which carries its own, is judged where it is loaded (_resume)
            # a diverged run ended as deterministically as a completed one: rerunning it gives the same end
            finished = earlier.get("status") in ("completed", "diverged")
            changed = _code_changed_since(earlier) if finished else []
            if finished and earlier.get("config_sha") == summary["config_sha"] and not changed:
                log.info("already completed with this config and code; kept as it is (%s)", rd.path)
                return earlier
            other = [f"other code ({'; '.join(changed[:3])})"] if changed else []
            if earlier.get("config_sha") != summary["config_sha"]:
                other.append("another config")
            if earlier.get("seed", v.top.seed) != v.top.seed:
                other.append(f"seed {earlier.get('seed')}")
            if other:    # a run of other code, config or seed is not this run: neither its result nor its checkpoint is reused
                log.info("made with %s; run again from round 1", ", ".join(other))
                rd.file("checkpoint.pt").unlink(missing_ok=True)
            summary["resumed_from"] = earlier.get("status")
        rd.write_json("summary.json", summary)
        summary = _train(cfg, v, rd, summary, t_start)
        return summary
    except BaseException as e:  # noqa: BLE001 - a run directory must say why it stopped
        summary.update(status="failed", error=f"{type(e).__name__}: {e}",
                       traceback=traceback.format_exc(limit=20), wall_time_s=time.time() - t_start,
                       peak_rss_mb=peak_rss_mb())
        try:
            rd.write_json("summary.json", summary)
        except Exception:  # noqa: BLE001 - the original error matters more
            pass
        if isinstance(e, (ConfigError, DataError)) and fresh and not multirun:
            # a problem with the input, found once the data were loaded: no run happened, so no run
            # directory is left behind (in a sweep the failed job stays, marked failed, for the report)
            log.removeHandler(handler)
            handler.close()
            summary["run_dir_removed"] = _remove_fresh_run_dir(rd.path)
            return summary
        log.error("run failed: %s: %s (run directory: %s)", type(e).__name__, e, rd.path)
        if isinstance(e, KeyboardInterrupt):
            raise
        return summary
    finally:
        log.removeHandler(handler)
        handler.close()


# what a run directory holds before the first round (Hydra's .hydra/ and fgx's first files)
_EARLY_FILES = {".hydra", "fgx.log", "summary.json", "partition.json"}


def _is_fresh(path: Path) -> bool:
    """Made for this run: nothing in it but Hydra's .hydra/ (a resumed or reused directory is not)."""
    return all(p.name == ".hydra" for p in path.iterdir())


def _remove_fresh_run_dir(path: Path) -> bool:
    """Remove a run directory that holds only what fgx and Hydra wrote before the first round, and its
    date folder (outputs/<date>/) when that is left empty. Anything else in it keeps it."""
    import shutil

    names = {p.name for p in path.iterdir() if not p.name.startswith(".") or p.name == ".hydra"}
    if not names <= _EARLY_FILES:
        return False
    shutil.rmtree(path, ignore_errors=True)
    parent = path.parent
    if parent.parent.name == "outputs" and len(parent.name) == 10 and not any(parent.iterdir()):
        parent.rmdir()
    return not path.exists()


def _train(cfg: DictConfig, v: Validated, rd: RunDir, summary: dict, t_start: float) -> dict:
    job = _build(v, rd)
    loop = _resume(job, rd, summary["config_sha"])
    _loop(job, rd, loop, OmegaConf.to_container(cfg, resolve=True))
    return _summarise(job, rd, loop, summary, t_start)


@dataclass
class Job:
    """What a run is made of once it is built: the data and its clients, the algorithm and everything
    around it (context, channel, privacy, executor, evaluator)."""
    v: Validated
    ds: Any
    clients: list
    pstats: dict
    ctx: Context
    algo: Any
    channel: Channel
    privacy: Any
    executor: Any
    cover: Any
    canaries: Any
    evaluator: "Evaluator"
    main_metric: str

    @property
    def info(self):
        return self.ds.info


@dataclass
class Loop:
    """Where the round loop stands: what a checkpoint restores and the summary reports."""
    start_round: int = 1
    best: dict | None = None
    client_best: list | None = None
    elapsed_before: float = 0.0
    last: dict | None = None           # the latest evaluation
    train_time: float = 0.0
    startup_s: float | None = None
    diverged: dict | None = None       # DivergenceWatch's event
    diagnostics: dict | None = None    # the mechanism diagnostics over the rounds
    attack: dict | None = None         # the threat's metrics at the latest evaluation (threat.metrics)
    identity: dict = field(default_factory=dict)   # config_sha and seed, kept in every checkpoint
    items: StateItems = field(default_factory=StateItems)   # test items of each compared state (not checkpointed)


def _build(v: Validated, rd: RunDir) -> Job:
    """Data, partition, clients and the algorithm with its context, before the first round."""
    top = v.top
    seed_everything(top.seed)
    device = resolve_device(top.device)
    data_dir = _data_dir(top)
    env = DataEnv(data_dir=data_dir, seed=top.seed, log=log)

    ds = v.entries["dataset"].obj(v.params["dataset"], env)
    check_graph(ds, v.names["dataset"])
    link = v.top.task.name == "link"
    if link:    # its graph as node pairs with their split (docs/link_prediction.md)
        from fgx.link.split import as_link_dataset
        ds = as_link_dataset(ds, v.top.task, top.seed)
    info = ds.info
    if bool(info.features_public) != v.features_public:
        raise RuntimeError(f"dataset '{v.names['dataset']}' reports features_public={info.features_public} but its "
                           f"config declares {v.features_public}: the checks made before loading would be wrong")
    log.info("dataset %s (%s, %s task): %d nodes, %d edges", info.name, info.source, info.task,
             ds.data.num_nodes, ds.data.edge_index.size(1))
    client_nodes = v.entries["partitioner"].obj(v.params["partitioner"], ds.data, info, top.seed)
    clients = build_clients(ds.data, info, client_nodes)
    check_clients(clients, info, v.names["partitioner"])
    if link:    # each client's training graph and labelled pairs
        from fgx.link.split import client_link_graphs
        client_link_graphs(clients, ds.data, v.top.task, top.seed)
    pstats = partition_stats(ds.data, info, clients)
    rd.write_json("partition.json", pstats)
    cross = pstats["cross_client_edges"]
    log.info("partitioner %s: %d clients, L/S %.2f%s", v.names["partitioner"], len(clients), pstats["ls_ratio"],
             "" if cross is None else f", {cross} cross-client edges")

    # the attack's malicious clients, drawn from the seed, and their data poisoned before the algorithm sees it
    threat = v.entries["threat"].obj(v.params["threat"])
    threat.choose(len(clients), top.seed)
    clients = threat.poison_data(clients, info, top.seed)
    aggregator = v.entries["aggregator"].obj(v.params["aggregator"])
    if threat.malicious:
        log.info("threat %s: malicious clients %s", v.names["threat"], sorted(threat.malicious))
    algo_cls = v.entries["algorithm"].obj
    privacy = v.entries["privacy"].obj(v.params["privacy"])
    executor = v.entries["executor"].obj(v.params["executor"])
    secure = v.entries["secure_aggregation"].obj(v.params["secure_aggregation"], top.seed)
    messages = secure.messages(algorithm_messages(algo_cls, v.params["algorithm"]), algo_cls)
    channel = Channel(messages, privacy=privacy, features_public=info.features_public)
    cover = coverage(v.entries["privacy"].obj, v.params["privacy"], messages)   # checked in validate()
    ctx = Context(clients=clients, info=info, config=v, params=v.params["algorithm"],
                  model_params=v.params["model"], model_builder=model_builder(v),
                  channel=channel, executor=executor, privacy=privacy, device=device, seed=top.seed,
                  log=log, global_data=ds.data, threat=threat, aggregator=aggregator,
                  secure_aggregation=secure)
    privacy.bind(ctx)
    algo = algo_cls(ctx)
    executor.start_round(top.seed, 0)   # client-side randomness is seeded per (seed, round, client)
    algo.setup()
    canaries = attach_audit(privacy, algo, ctx, audited_name(v))     # None unless privacy.audit.canaries > 0
    main_metric = top.main_metric or info.main_metric
    evaluator = Evaluator(ctx, ds.data, top.eval, top.metrics, main_metric)
    work = local_work(v.names["algorithm"], v.params["algorithm"], clients, info.task)
    log.info("local work: %s; %d rounds", work["text"], top.rounds)
    return Job(v, ds, clients, pstats, ctx, algo, channel, privacy, executor, cover, canaries, evaluator, main_metric)


def model_builder(v: Validated):
    """The model group's builder; with task=link, its node GNN as the encoder of the link model."""
    if v.top.task.name != "link":
        return v.entries["model"].obj
    from fgx.link.model import LinkModelBuilder
    return LinkModelBuilder(v.entries["model"].obj, v.top.task)


def _not_this_run(ckpt: dict, identity: dict) -> list[str]:
    """How a checkpoint differs from the run about to use it: its code (the fingerprint taken when it was
    written), its config or its seed; a checkpoint without them is from before they were kept."""
    from fgx.provenance import code_changes

    code = ckpt.get("code")
    changed = code_changes(code) if isinstance(code, dict) else ["no code fingerprint"]
    out = [f"other code ({'; '.join(changed[:3])})"] if changed else []
    if ckpt.get("config_sha") != identity["config_sha"]:
        out.append("another config")
    if ckpt.get("seed") != identity["seed"]:
        out.append(f"seed {ckpt.get('seed')}")
    return out


def _resume(job: Job, rd: RunDir, config_sha: str) -> Loop:
    """The loop's starting point: round 1, or the state of the run directory's checkpoint (resume=true)."""
    loop = Loop(identity={"config_sha": config_sha, "seed": job.v.top.seed})
    if job.v.top.resume:
        ckpt = rd.load_checkpoint()
        other = _not_this_run(ckpt, loop.identity) if ckpt is not None else []
        if other:    # made by other code, another config or seed: not this run's state
            log.info("checkpoint made with %s; run again from round 1", ", ".join(other))
            ckpt = None
        if ckpt is not None:
            job.algo.load_state_dict(ckpt["algorithm"])
            job.privacy.load_state_dict(ckpt["privacy"])
            job.ctx.aggregator.load_state_dict(ckpt.get("aggregator") or {})
            job.channel.load_state_dict(ckpt["channel"])
            torch.set_rng_state(ckpt["torch_rng"])
            loop.start_round, loop.best, loop.elapsed_before = ckpt["round"] + 1, ckpt["best"], ckpt["elapsed_s"]
            loop.client_best = ckpt.get("client_best")
            rows = [r for r in rd.read_jsonl("metrics.jsonl") if r["round"] <= ckpt["round"]]
            rd.rewrite_jsonl("metrics.jsonl", rows)
            log.info("resumed from checkpoint at round %d", ckpt["round"])
        else:
            log.info("resume=true but no checkpoint in %s: starting from round 1", rd.path)
    if loop.start_round == 1 and rd.file("metrics.jsonl").exists():
        rd.file("metrics.jsonl").unlink()
    return loop


def _loop(job: Job, rd: RunDir, loop: Loop, resolved_cfg: dict) -> None:
    """The rounds: each one trained, its records written, evaluated every eval_every rounds (the best
    round and each client's best kept) and checkpointed."""
    top, algo, ctx, channel, privacy = job.v.top, job.algo, job.ctx, job.channel, job.privacy
    main_metric = job.main_metric
    progress = Progress(top.rounds, top.output.progress, log, start=loop.start_round - 1)
    metric_logger = make_logger(top.logger, rd.path, resolved_cfg, top.experiment_name)
    t_loop = time.time() - loop.elapsed_before
    started = process_start_time()
    # from process start to the first round: meaningful for a fresh single run only
    loop.startup_s = time.time() - started if started is not None and loop.start_round == 1 else None
    local_eval = top.eval_model == "local"
    last_ckpt = time.time()
    divergence = DivergenceWatch(cap=classification_cap(job.info.task, job.info.num_classes))
    diagnostics = Diagnostics()
    try:
        for r in range(loop.start_round, top.rounds + 1):
            t_round = time.time()
            ACTIVITY.start(None if top.output.progress == "off" else 10.0, f"round {r}/{top.rounds}: ")
            job.executor.start_round(top.seed, r)
            stats = algo.round(r)
            stats.update(privacy.on_round_end(r))
            stats["round_time_s"] = time.time() - t_round
            for name, rows in ctx.extras.items():
                for row in rows:
                    rd.append_jsonl(f"{name}.jsonl", {"round": r, **row} if isinstance(row, dict) else
                                    {"round": r, "value": row})
            ctx.extras.clear()
            evaluate = r % top.eval_every == 0 or r == top.rounds
            # a method without a training loss (certified_lr's closed-form solve) prints none
            status = f"loss {stats['loss']:.4f}" if isinstance(stats.get("loss"), (int, float)) else ""
            loss = stats.get("loss")
            if isinstance(loss, float) and loss != loss and not holds_nan(algo.state_dict()):
                loss = None        # no client trained this round (mean_loss of none): no loss, not a NaN one
            if (note := divergence.update(r, loss)) is not None:
                log.warning(note)
                evaluate = True        # the diverged round's model is scored once, then the loop stops
            diagnostics.update(stats)
            if evaluate:
                res = job.evaluator(algo, local=local_eval, complete=r == top.rounds or note is not None,
                                    items=True)
                attack = ctx.threat.metrics(algo, job.evaluator)     # {} without an attack that measures itself
                loop.attack = attack or loop.attack
                cum_bytes = sum(sum(b.values()) for rr, b in channel.bytes.items() if rr <= r)
                for split, m in res.items():
                    rd.append_jsonl("metrics.jsonl", {
                        "round": r, "split": split, **{f"train_{k}" if k == "loss" else k: val
                                                        for k, val in stats.items()},
                        "mean": m["mean"], **({"clients_skipped": m["skipped"]} if m["skipped"] else {}),
                        "pooled": m["pooled"], "per_client": m["per_client"], **({"threat": attack} if attack else {}),
                        "bytes_cumulative": cum_bytes, "wall_time_s": time.time() - t_loop})
                    metric_logger.log(r, split, {**m["mean"], **({f"pooled_{k}": x for k, x in m["pooled"].items()}
                                                                 if m["pooled"] else {})})
                loop.last = res
                sel = "val" if "val" in res else "test"      # a dataset without a validation split
                val = res[sel]["mean"].get(main_metric)
                best_is_new = loop.best is None or (val is not None and val == val and
                                                    improves(val, loop.best["val"], main_metric))
                if best_is_new:
                    loop.best = {"round": r, "val": val, "test": res["test"]["mean"],
                                 "per_client": res["test"]["per_client"]}
                loop.client_best = update_client_best(loop.client_best, res, main_metric, r)
                loop.items.update(res, best_is_new, [i for i, b in enumerate(loop.client_best or [])
                                                     if b is not None and b["round"] == r])
                status += f"  {sel} {main_metric} {val:.4f}" if val is not None else ""
                # a checkpoint rewrites the whole state: at most once per checkpoint_every_s (and after the
                # last round), not at every evaluation of a fast run
                if note is None and top.output.checkpoint and (r == top.rounds or time.time() - last_ckpt >= top.output.checkpoint_every_s):
                    last_ckpt = time.time()
                    rd.save_checkpoint({**loop.identity, "code": code_fingerprint(),
                                        "round": r, "algorithm": algo.state_dict(), "privacy": privacy.state_dict(),
                                        "aggregator": ctx.aggregator.state_dict(), "channel": channel.state_dict(), "torch_rng": torch.get_rng_state(),
                                        "best": loop.best, "client_best": loop.client_best,
                                        "elapsed_s": time.time() - t_loop})
            progress.update(r, status.strip(), evaluate)
            if note is not None:
                break
    finally:
        ACTIVITY.start(None)
        progress.close()
        metric_logger.close()
    loop.train_time = time.time() - t_loop
    loop.diverged = divergence.event
    loop.diagnostics = diagnostics.summary() if diagnostics.values else None


def _summarise(job: Job, rd: RunDir, loop: Loop, summary: dict, t_start: float) -> dict:
    """After the rounds: unlearning, the communication and privacy reports, and summary.json."""
    v, top, info, algo, privacy, channel = job.v, job.v.top, job.info, job.algo, job.privacy, job.channel
    last = loop.last
    if last is None:   # resumed after the final round: evaluate the restored state
        last = job.evaluator(algo, local=top.eval_model == "local", items=True)
        loop.items.update(last, False, [])
        loop.attack = job.ctx.threat.metrics(algo, job.evaluator) or None
    privacy.finish(algo)
    unlearning = v.entries["unlearning"].obj(v.params["unlearning"])
    # nothing to unlearn from a model that stopped training where it diverged
    unl = unlearning.run(job.ctx, algo) if loop.diverged is None else None
    if unl is not None:
        rd.write_json("unlearning.json", unl)
    comm = channel.report()
    rd.write_json("comm.json", comm)
    # an algorithm with its own local DP (FedPerGNN) accounts for it itself: privacy.json carries both
    algo_dp = algo.privacy_report()
    rd.write_json("privacy.json", {**privacy.report(), **({"algorithm_ldp": algo_dp} if algo_dp else {}),
                                   "messages": job.cover.as_dict(info.features_public),
                                   **({"audit": job.canaries.report()} if job.canaries is not None else {})})
    job.executor.shutdown()

    pstats = job.pstats
    sampling = loop.items.summary(info.num_classes, job.evaluator.minority, job.evaluator.names)
    summary.update({
        # diverged: stopped at the round its loss diverged (fgx/divergence.py); never averaged as completed
        "status": "completed" if loop.diverged is None else "diverged",
        "main_metric": job.main_metric,
        "final": last["test"]["mean"],
        # every client's test items as one set (not the server's model: that is eval_model=global)
        "final_pooled": last["test"]["pooled"],
        "final_clients_skipped": last["test"].get("skipped") or {},   # clients each mean of `final` left out
        # bootstrap replicates of each model state's test metrics over the test items, drawn alike in every
        # run (fgx/resampling.py): what a table's ordering test needs of the evaluation data; and the
        # final state's standard error from them
        "sampling": sampling,
        "sampling_se": (sampling or {}).pop("final_sd", None),
        "best": loop.best,
        "best_client": client_best_summary(loop.client_best),
        "evaluation": job.evaluator.describe(),
        "per_client": last["test"]["per_client"],
        "rounds": top.rounds,
        "wall_time_s": time.time() - t_start,
        "train_time_s": loop.train_time,
        "startup_s": loop.startup_s,
        "eval_model": top.eval_model,
        "peak_rss_mb": peak_rss_mb(),
        "total_bytes": comm["total_bytes"],
        "privacy": {**privacy.headline(), "covers": list(job.cover.covered),
                    **({"epsilon_algorithm_ldp": algo_dp["epsilon"]} if algo_dp else {})},
        # scalar facts only: long lists (e.g. PNA's degree histogram) stay out of the summary
        "data": {"name": info.name, "source": info.source, "task": info.task,
                 **{k: x for k, x in info.extra.items() if isinstance(x, (str, int, float, bool)) or x is None},
                 **test_majority(job.ds.data, info.task)},
        "components": dict(v.names),
        "presets": conf_choices(v.names),
        "partition": {k: pstats[k] for k in ("num_clients", "ls_ratio", "cross_client_edges")},
        "seed": top.seed,
        # this run's own origin (a table record keeps it per run) and the code it executed (staleness)
        # with the kernels the CPU ran (other rounding under AVX2 than AVX-512) and a hash of the data files read
        "provenance": {**provenance(run_command()), "code": {
            **code_fingerprint(), "kernels": kernels(),
            "data": data_fingerprint(_data_dir(top), _data_path(v, top, info), info.source)}},
    })
    if loop.diverged is not None:
        summary["diverged"] = loop.diverged
    if loop.diagnostics is not None:
        summary["diagnostics"] = loop.diagnostics
    if v.names["threat"] != "none" or not job.ctx.aggregator.neutral:
        summary["threat"] = {**job.ctx.threat.report(), "aggregator": v.names["aggregator"],
                             "pre": v.params["aggregator"].pre, **(loop.attack or {})}
    if unl is not None:
        summary["unlearning"] = unl.get("summary", {k: unl[k] for k in list(unl)[:8] if not isinstance(unl[k], list)})
    if reference_applies(info.task, info.num_classes, job.main_metric) and "positives" in last["test"]:
        # the score beside what it means: trivial detectors, the paper's figure, the centralised ceiling
        summary["reference"] = reference(summary, last["test"]["positives"])
    rd.write_json("summary.json", summary)
    if loop.diverged is not None:
        log.error("run diverged at round %d of %d (%s): status diverged, its metrics are not results; run "
                  "directory: %s", loop.diverged["round"], top.rounds, loop.diverged["rule"], rd.path)
        return summary
    log.info("done in %.1fs: test %s = %.4f (mean over %d clients); run directory: %s",
             summary["wall_time_s"], job.main_metric, summary["final"].get(job.main_metric, float("nan")),
             len(job.clients), rd.path)
    return summary


def _data_dir(top) -> Path:
    return Path(top.data_dir or default_data_dir()).expanduser()


def _data_path(v: Validated, top, info) -> Path | None:
    """The folder or file under the data root the dataset's loader read (its registered ``folder``, else
    the root or file its info names), for the run's data fingerprint; None for generated data."""
    from fgx.registry import DATASETS

    folder = DATASETS.get(v.names["dataset"]).meta.get("folder")
    if folder is not None:
        try:
            return _data_dir(top) / folder(v.params["dataset"])
        except Exception:  # noqa: BLE001 - a folder rule that does not apply: fall back to what info names
            pass
    for key in ("root", "file", "path"):
        x = info.extra.get(key)
        if isinstance(x, str) and Path(x).expanduser().exists():
            return Path(x)
    return None


def test_majority(data, task: str) -> dict:
    """The share of the test split's most common class (what predicting one class scores): the floor a
    classifier's test accuracy must clear (`fgx repro` checks baselines against it). Regression: the test
    MSE of predicting the training targets' mean, the floor a regressor's MSE must beat."""
    prefix = {"node": "", "graph": "graph_", "regression": ""}.get(task, "edge_")
    y, mask = getattr(data, prefix + "y", None), getattr(data, prefix + "test_mask", None)
    if task == "regression" and y is not None and mask is not None and y.dtype.is_floating_point:
        train = getattr(data, prefix + "train_mask", None)
        if train is None or not bool(train.any()) or not bool(mask.any()):
            return {}
        return {"test_mean_mse": float(((y[mask].double() - y[train].double().mean()) ** 2).mean())}
    if y is None or mask is None or y.dim() != 1 or y.dtype.is_floating_point:
        return {}
    yy = y[mask]
    if yy.numel() == 0 or int(yy.min()) < 0:
        return {}
    return {"test_majority_rate": float(torch.bincount(yy).max()) / yy.numel()}


def update_client_best(client_best: list | None, res: dict, main_metric: str, r: int) -> list | None:
    """Each client's test metrics at its own best validation round so far (the FED-PUB/FedGSP code's
    protocol: every client keeps the test score of its best validation round, and the mean over
    clients is reported). `best` above is the other protocol: one round, chosen on the mean."""
    if "val" not in res:
        return client_best
    vals, tests = res["val"]["per_client"], res["test"]["per_client"]
    client_best = client_best or [None] * len(vals)
    for i, (v, t) in enumerate(zip(vals, tests)):
        score = v.get(main_metric)
        if score is None or score != score:
            continue
        if client_best[i] is None or improves(score, client_best[i]["val"], main_metric):
            client_best[i] = {"round": r, "val": score, "test": t}
    return client_best


def client_best_summary(client_best: list | None) -> dict | None:
    found = [b for b in client_best or [] if b is not None]   # a client without validation items has none
    if not found:
        return None
    return {"test": mean_over_clients([b["test"] for b in found]),
            "val": float(sum(b["val"] for b in found) / len(found)),
            "rounds": [None if b is None else b["round"] for b in client_best]}


def conf_choices(names: dict[str, str]) -> dict[str, str]:
    """The conf file each group was chosen by (`algorithm=fedavg_lgcn` runs component `lpsfed`), where it
    differs from the component's name; empty outside a Hydra job."""
    try:
        from hydra.core.hydra_config import HydraConfig

        if not HydraConfig.initialized():
            return {}
        choices = {str(k).split("@")[0]: v for k, v in HydraConfig.get().runtime.choices.items()}
    except Exception:  # noqa: BLE001 - only a label
        return {}
    return {g: choices[g] for g in names if choices.get(g) not in (None, names[g])}
