"""Config schema and validation. Every group's YAML is checked against its component's params
dataclass before any work starts; errors name the full key and the allowed values."""
from __future__ import annotations

import dataclasses
import functools
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from fgx.errors import ConfigError as ConfigError   # raised by every config check; importable from here
from fgx.link.params import TaskParams


def _exact_div(a, b) -> int:
    """``${fgx.div:a,b}``: a / b when b divides a (e.g. rounds = T / K for a sweep over K at fixed T)."""
    a, b = int(a), int(b)
    if b <= 0 or a % b:
        raise ValueError(f"fgx.div: {a} is not a multiple of {b}")
    return a // b


if not OmegaConf.has_resolver("fgx.div"):
    OmegaConf.register_new_resolver("fgx.div", _exact_div)


def spec(min: float | None = None, max: float | None = None, choices: list | None = None,
         help: str = "", gt: float | None = None) -> dict:
    """Field metadata understood by :func:`check_value` (``gt``: strictly greater than)."""
    return {"min": min, "max": max, "choices": choices, "help": help, "gt": gt}


def _describe(f: dataclasses.Field) -> str:
    m = f.metadata or {}
    tp = _type_name(f.type)
    parts = []
    if m.get("choices") is not None:
        return f"one of {list(m['choices'])}"
    if m.get("gt") is not None:
        parts.append(f"> {m['gt']}")
    if m.get("min") is not None:
        parts.append(f">= {m['min']}")
    if m.get("max") is not None:
        parts.append(f"<= {m['max']}")
    return f"{tp}" + (" " + " and ".join(parts) if parts else "")


def _type_name(tp) -> str:
    if isinstance(tp, str):
        return tp
    return getattr(tp, "__name__", str(tp)).replace("typing.", "")


def _check_scalar(key: str, f: dataclasses.Field, v: Any) -> None:
    m = f.metadata or {}
    if v is None:
        return
    items = v if isinstance(v, (list, tuple)) else [v]
    for x in items:
        if m.get("choices") is not None and x not in m["choices"]:
            raise ConfigError(key, v, _describe(f))
        if isinstance(x, (int, float)) and not isinstance(x, bool):
            if (m.get("min") is not None and x < m["min"]) or (m.get("max") is not None and x > m["max"]) \
                    or (m.get("gt") is not None and x <= m["gt"]):
                raise ConfigError(key, v, _describe(f))


def build_params(schema: type, node: DictConfig | dict | None, prefix: str, skip=("name",)):
    """Build ``schema`` (a dataclass) from a config node: unknown keys, wrong types and values
    outside the field metadata raise :class:`ConfigError` naming ``prefix.key``."""
    if node is None:
        node = {}
    elif isinstance(node, DictConfig):
        try:
            node = OmegaConf.to_container(node, resolve=True)
        except OmegaConfBaseException as e:
            raise ConfigError(f"{prefix}.{getattr(e, 'key', None) or '?'}", "?", f"a resolvable value ({e})") from None
    elif not isinstance(node, dict):
        raise ConfigError(prefix or "config", node, f"a mapping of keys to values for {schema.__name__}")
    fields, hints = _schema(schema)
    kwargs = {}
    for key in node.keys():
        if key in skip:
            continue
        full = f"{prefix}.{key}" if prefix else str(key)
        if key not in fields:
            raise ConfigError(full, node[key], f"keys of {prefix or 'the top level'}: {sorted(fields)}")
        f = fields[key]
        tp = hints[key]
        raw = node[key]
        if dataclasses.is_dataclass(tp):
            kwargs[key] = build_params(tp, raw, full, skip=())
            continue
        try:
            value = _plain_value(tp, raw)
            if value is _SLOW:
                typed = _Box.node(tp)
                typed.v = raw
                value = OmegaConf.to_container(typed, resolve=True)["v"]
        except OmegaConfBaseException as e:
            msg = str(e).splitlines()[0]
            raise ConfigError(full, raw if not isinstance(raw, (DictConfig, ListConfig))
                              else OmegaConf.to_container(raw), f"{_describe(f)} ({msg})") from None
        _check_scalar(full, f, value)
        kwargs[key] = value
    obj = schema(**kwargs)
    post = getattr(obj, "validate", None)
    if callable(post):
        post(prefix)
    return obj


_SLOW = object()
_SCALARS = {int: (int,), float: (int, float), str: (str,), bool: (bool,)}


def _plain_value(tp, raw):
    """The value for a field of type `tp` when `raw` already is one (the common case, checked here in
    microseconds); `_SLOW` when OmegaConf must convert or refuse it (lists, unions, strings of numbers)."""
    args = typing.get_args(tp)
    if args and type(None) in args and len(args) == 2:        # X | None
        if raw is None:
            return None
        tp = args[0] if args[1] is type(None) else args[1]
    ok = _SCALARS.get(tp)
    if ok is not None and type(raw) in ok:
        return float(raw) if tp is float else raw
    return _SLOW


@functools.lru_cache(maxsize=None)
def _schema(schema: type) -> tuple[dict, dict]:
    return {f.name: f for f in dataclasses.fields(schema)}, typing.get_type_hints(schema)


class _Box:
    _cache: dict = {}
    _nodes: dict = {}

    @classmethod
    def node(cls, tp):
        """A reusable typed OmegaConf node with one field `v` of type `tp` (assigning checks the type)."""
        if tp not in cls._nodes:
            cls._nodes[tp] = OmegaConf.structured(cls.make(tp))
        return cls._nodes[tp]

    @classmethod
    def make(cls, tp):
        if tp not in cls._cache:
            cls._cache[tp] = dataclasses.make_dataclass("Box", [("v", tp, field(default=MISSING))])
        return cls._cache[tp]


def conf_dir() -> Path:
    """fgx's conf/ directory (FGX_CONF_DIR, else the one beside the package)."""
    env = os.environ.get("FGX_CONF_DIR")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent
    for cand in (here.parent / "conf", here / "conf"):
        if (cand / "config.yaml").exists():
            return cand
    raise SystemExit("fgx: cannot find the conf/ directory (set FGX_CONF_DIR or install fgx with `pip install -e .`)")


def default_data_dir() -> str:
    env = os.environ.get("FGX_DATA_DIR")
    if env:
        return env
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return str(Path(base) / "fgx")


@dataclass
class OutputParams:
    checkpoint: bool = True          # write checkpoint.pt (at evaluations, see checkpoint_every_s)
    checkpoint_every_s: float = field(default=60.0, metadata=spec(
        min=0.0, help="write the checkpoint at an evaluation only when this many seconds passed since the last "
                      "one (and always after the last round); 0: at every evaluation"))
    progress: str = field(default="auto", metadata=spec(choices=["auto", "rich", "plain", "off"]))


@dataclass
class EvalParams:
    splits: list[str] = field(default_factory=lambda: ["val", "test"], metadata=spec(
        choices=["train", "val", "test"], help="splits scored at each evaluation (add train for training metrics)"))
    batch_size: int = field(default=8192, metadata=spec(
        min=1, help="items per batch when an algorithm evaluates on sampled neighbourhoods"))
    subset: int | None = field(default=None, metadata=spec(
        min=1, help="intermediate evaluations score a fixed random subset of at most this many items per split "
                    "and client; the final evaluation is always complete; null: every item every time"))
    inference: str = field(default="auto", metadata=spec(
        choices=["auto", "layerwise", "sampled"],
        help="how algorithms with sampler fanouts score items: layerwise (every node's embedding once per "
             "layer over the whole client graph, fgx.inference), sampled (batches of eval.batch_size on "
             "sampled neighbourhoods), auto (layerwise for complete evaluations where the model allows it)"))
    chunk_edges: int = field(default=1 << 20, metadata=spec(
        min=1, help="layer-wise inference: in-edges per chunk of destination nodes (bounds a layer's memory)"))

    def validate(self, prefix: str) -> None:
        if "test" not in self.splits:
            raise ConfigError(f"{prefix}.splits", self.splits, "a list that includes 'test' (the reported split)")


@dataclass
class TopParams:
    seed: int = field(default=0, metadata=spec(min=0))
    device: str = field(default="cpu", metadata=spec(choices=["cpu", "cuda", "auto"]))
    rounds: int = field(default=50, metadata=spec(min=1))
    eval_every: int = field(default=5, metadata=spec(min=1))
    eval_model: str = field(default="global", metadata=spec(
        choices=["global", "local"],
        help="what is scored: global = the server's model (each client's own model in personalised algorithms); "
             "local = each client's model right after its latest local step (OpenFGL's and FED-PUB's protocol)"))
    data_dir: str | None = None
    main_metric: str | None = None
    metrics: list[str] | None = field(default=None, metadata=spec(
        choices=["accuracy", "f1_macro", "f1_minority", "roc_auc", "pr_auc"],
        help="classification metrics computed at evaluations; null: all (f1_minority and pr_auc on binary tasks "
             "only; main_metric is always computed)"))
    resume: bool = False
    output: OutputParams = field(default_factory=OutputParams)
    eval: EvalParams = field(default_factory=EvalParams)
    experiment_name: str | None = None
    logger: str = field(default="none", metadata=spec(choices=["none", "tensorboard", "mlflow"]))
    # a table cell's method (conf/method/<name>.yaml sets it) and the values a table shares between its
    # methods (conf/experiment/<table>.yaml; read by the method files through interpolation, and by `fgx tune`)
    method: str | None = None
    table: dict[str, Any] = field(default_factory=dict)
    task: TaskParams = field(default_factory=TaskParams)   # `task=link` (conf/task/link.yaml); absent: the dataset's

    def validate(self, prefix: str) -> None:
        from fgx.loggers import missing_package

        if self.device == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise ConfigError("device", "cuda", "'cpu' or 'auto' (no CUDA device is available here)")

        root = Path(self.data_dir or default_data_dir()).expanduser()
        if root.exists() and not root.is_dir():
            raise ConfigError("data_dir", str(root), "a folder (the data root that holds the datasets' folders); "
                                                     "this is a file" + ("" if self.data_dir else " (from FGX_DATA_DIR)"))
        hint = missing_package(self.logger)
        if hint:
            raise ConfigError("logger", self.logger, f"an installed logger (the {self.logger} package is "
                                                     f"missing: {hint}) or 'none'")


GROUP_KEYS = ("dataset", "partitioner", "model", "algorithm", "privacy", "unlearning", "executor", "threat", "aggregator",
              "secure_aggregation")
# groups a config written before they existed lacks (a committed record's .hydra/config.yaml): absent means
# this component, which computes what every run computed before (no attack; the weighted average of updates
# the server receives in clear)
GROUP_DEFAULTS = {"threat": {"name": "none"}, "aggregator": {"name": "mean", "pre": "none"},
                  "secure_aggregation": {"name": "none"}}


@dataclass
class Validated:
    top: TopParams
    params: dict[str, Any]      # group -> params dataclass
    names: dict[str, str]       # group -> component name
    entries: dict[str, Any]     # group -> registry Entry

    @property
    def features_public(self) -> bool:
        """What the dataset declares before it is loaded: its `features_public` key, else its
        registration's `features_public=` (AML: constant node features), else private. The loaded
        DatasetInfo must say the same (the trainer checks)."""
        declared = getattr(self.params["dataset"], "features_public", None)
        if declared is None:
            declared = self.entries["dataset"].meta.get("features_public", False)
        return bool(declared)


def validate(cfg: DictConfig) -> Validated:
    """Check the whole resolved config. Raises ConfigError on the first problem."""
    from fgx.registry import GROUPS

    try:
        container = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as e:
        raise ConfigError(getattr(e, "full_key", "?") or "?", "?", f"a resolvable value ({e})") from None
    top_node = {k: v for k, v in container.items() if k not in GROUP_KEYS and k != "hydra"}
    top = build_params(TopParams, top_node, "", skip=())
    params, names, entries = {}, {}, {}
    for group in GROUP_KEYS:
        node = container.get(group, GROUP_DEFAULTS.get(group))
        if node is None:
            raise ConfigError(group, None, f"a `{group}` config group (conf/{group}/*.yaml)")
        if not isinstance(node, dict) or "name" not in node:
            raise ConfigError(f"{group}.name", None, f"a component name, one of {GROUPS[group].names()}")
        entry = GROUPS[group].get(node["name"])
        names[group] = node["name"]
        entries[group] = entry
        if group == "dataset":     # read by fgx/launch.py when the command line names no algorithm
            node = {k: v for k, v in node.items() if k != DATASET_ALGORITHM_KEY}
        params[group] = build_params(entry.params, node, group) if entry.params else None
        if entry.params is None and len(node) > 1:
            extra = sorted(k for k in node if k != "name")
            raise ConfigError(f"{group}.{extra[0]}", node[extra[0]], f"no parameters for {group} '{node['name']}'")
    # no privacy budget that misses a message kind (fgx/privacy/base.py), before any other check
    entries["privacy"].obj.check_coverage(Validated(top, params, names, entries))
    from fgx.link.checks import check_link_config, check_link_dataset, run_task

    check_link_dataset(top, names, entries)
    _check_tasks(names, entries, run_task(top, entries))
    check_link_config(top, names, container["algorithm"])
    if entries["dataset"].meta.get("task") == "graph" and getattr(params["algorithm"], "fanouts", None):
        raise ConfigError("algorithm.fanouts", params["algorithm"].fanouts, "null for the graph task (each step runs "
                          "on the client's whole graphs; the sampler draws node neighbourhoods)")
    if top.eval_model == "local" and not getattr(entries["algorithm"].obj, "has_local_models", False):
        raise ConfigError("eval_model", "local", f"'global' (algorithm '{names['algorithm']}' keeps no per-client "
                                                 f"model after a local step to score)")
    for group in GROUP_KEYS:
        hook = getattr(entries[group].obj, "check_config", None)
        if callable(hook):
            hook(params[group], Validated(top, params, names, entries))
    return Validated(top, params, names, entries)


def _check_tasks(names: dict, entries: dict, task: str | None) -> None:
    """An algorithm or model that does not support the run's task (its dataset's, or `task=link`) fails
    here, before any work, naming the ones that do."""
    if task is None:
        return

    for group in ("algorithm", "model", "partitioner"):
        tasks = entries[group].meta.get("tasks")
        if tasks is not None and task not in tasks:
            allowed, sibling = _task_siblings(group, names[group], task)
            raise ConfigError(f"{group}.name", names[group],
                              f"{'an' if group[0] in 'aeiou' else 'a'} {group} that supports the {task!r} task of dataset "
                              f"'{names['dataset']}': one of {allowed} ({group} '{names[group]}' supports {list(tasks)})"
                              + (f"; did you mean {group}={sibling}?" if sibling else ""))
    # a partitioner that reads a node attribute only some datasets have (by_community: data.community)
    needs = set(entries["partitioner"].meta.get("needs", ()))
    missing = needs - set(entries["dataset"].meta.get("provides", ()))
    if missing:
        from fgx.registry import DATASETS

        have = [n for n in DATASETS.names() if needs <= set(DATASETS.get(n).meta.get("provides", ()))]
        raise ConfigError("partitioner.name", names["partitioner"],
                          f"a partitioner for dataset '{names['dataset']}': '{names['partitioner']}' needs node "
                          f"attribute(s) {sorted(missing)}, which only datasets {have} provide")


def _task_siblings(group: str, name: str, task: str) -> tuple[list[str], str | None]:
    """The components of ``group`` that support ``task``, and the one nearest ``name`` (its own
    variant for the task first: fedssp -> fedssp_graph, gin -> gin_graph; else the closest spelling)."""
    import difflib

    from fgx.registry import GROUPS

    reg = GROUPS[group]
    allowed = [n for n in reg.names() if task in (reg.get(n).meta.get("tasks") or (task,))]
    variants = [n for n in allowed if n.startswith(name + "_") or name.startswith(n + "_")]
    close = variants or difflib.get_close_matches(name, allowed, n=1, cutoff=0.6)
    return allowed, (close[0] if close else None)


# Keys that say where and how a run is kept, not what it computes: left out of the fingerprint that
# ties a table's record to the config that made it (`fgx repro`), and of the resume-skip check.
BOOKKEEPING_KEYS = ("data_dir", "output", "resume", "logger", "experiment_name", "seed", "hydra")
# `dataset.default_algorithm`: the algorithm a dataset runs when the command line names none (fgx/launch.py);
# the algorithm a run uses is in its config either way
DATASET_ALGORITHM_KEY = "default_algorithm"
BOOKKEEPING_DOTTED = ("dataset.download", f"dataset.{DATASET_ALGORITHM_KEY}")


def _is_neutral(node, neutral: dict) -> bool:
    """``threat: {name: none}``; ``aggregator: {name: mean, pre: none, ...}``: the parameters of another
    aggregator or pre-aggregation that the plain average does not read do not matter."""
    return isinstance(node, dict) and all(node.get(k) == v for k, v in neutral.items())


def config_fingerprint(cfg: DictConfig | dict) -> tuple[dict, str]:
    """The resolved config without bookkeeping keys, and a short hash of it: two runs with the same
    fingerprint and seed compute the same thing."""
    import hashlib
    import json

    c = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
    c = {k: v for k, v in c.items() if k not in BOOKKEEPING_KEYS}
    for dotted in BOOKKEEPING_DOTTED:
        group, _, key = dotted.partition(".")
        if isinstance(c.get(group), dict) and key in c[group]:
            c[group] = {k: v for k, v in c[group].items() if k != key}
    # a canary audit that is off (privacy.audit.canaries: 0, fgx/privacy/audit/) changes nothing a run computes
    # no attack and the plain average compute what every run computed before these groups existed: left out,
    # so that adding them changed no committed record's fingerprint
    for group, neutral in GROUP_DEFAULTS.items():
        if group in c and _is_neutral(c[group], neutral):
            del c[group]
    priv = c.get("privacy")
    if isinstance(priv, dict) and isinstance(priv.get("audit"), dict) and not priv["audit"].get("canaries"):
        c["privacy"] = {k: v for k, v in priv.items() if k != "audit"}
    sha = hashlib.sha256(json.dumps(c, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return c, sha
