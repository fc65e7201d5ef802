"""The ``task`` config key: absent (null) for a dataset's own task, or the link-prediction task's values
(conf/task/link.yaml, selected by ``task=link``). Validated with the top-level config (fgx/config.py:
``TopParams.task``); this module imports nothing of fgx but its error, so fgx/config.py can hold it."""
from __future__ import annotations

from dataclasses import dataclass, field

from fgx.errors import ConfigError


def _meta(help: str, choices: list | None = None, min: float | None = None, max: float | None = None,
          gt: float | None = None) -> dict:
    # the keys fgx.config.spec() writes (that module imports this one, so it cannot be imported here)
    return {"min": min, "max": max, "choices": choices, "help": help, "gt": gt}


@dataclass
class TaskParams:
    name: str | None = field(default=None, metadata=_meta(
        "null: the dataset's own task; link: predict the missing edges of each client's subgraph", choices=["link"]))
    split: str = field(default="random", metadata=_meta(
        "random: the node pairs at random (fractions val/test); temporal: by the time a pair first appears "
        "(test: the last time, val: the one before; the dataset must carry edge times)", choices=["random", "temporal"]))
    val: float = field(default=0.1, metadata=_meta("random split: share of the pairs for validation", min=0.0, max=1.0))
    test: float = field(default=0.1, metadata=_meta("random split: share of the pairs for test", gt=0.0, max=1.0))
    split_seed: int | None = field(default=None, metadata=_meta(
        "seed of the random split and of the negatives; null: the run's seed", min=0))
    window: int | None = field(default=None, metadata=_meta(
        "temporal split: training pairs from the last this many times before the validation time (1: a sliding "
        "window of one step, 4D-FED-GNN+); null: all earlier times (STFL/StaticGNN's growing window)", min=1))
    cross_client: str = field(default="exclude", metadata=_meta(
        "an edge whose ends two clients own: exclude (neither holds it: OpenFGL's link task), both (each holds it, "
        "the remote end a featureless halo node), source (the owner of its source, the end with the smaller node "
        "id, holds it)", choices=["exclude", "both", "source"]))
    train_negatives: int = field(default=1, metadata=_meta("negatives per training positive (OpenFGL: 1)", min=1))
    resample: bool = field(default=True, metadata=_meta(
        "draw each training negative's destination afresh at every training step (PyG's link_pred example, OGB's "
        "examples); false: the ones drawn once (PyG RandomLinkSplit's add_negative_train_samples, OpenFGL)"))
    eval_negatives: int = field(default=100, metadata=_meta(
        "negatives per validation/test positive: its source with another destination (OGB citation2's "
        "protocol; pooled, they are the Hits@K negatives)", min=1))
    decoder: str = field(default="dot", metadata=_meta(
        "dot: <z_u, z_v>; mlp: an MLP on z_u * z_v (OGB's LinkPredictor)", choices=["dot", "mlp"]))
    decoder_hidden: int | None = field(default=None, metadata=_meta("mlp decoder width; null: model.hidden", min=1))
    decoder_layers: int = field(default=2, metadata=_meta("mlp decoder: linear layers", min=1))
    hits_k: list[int] = field(default_factory=lambda: [10, 50], metadata=_meta(
        "K of Hits@K (a positive counts when it scores above the K-th highest negative of its client's split)", min=1))
    main_metric: str = field(default="roc_auc", metadata=_meta(
        "the metric that picks the best round: roc_auc, mrr or hits@K with K in hits_k"))

    def validate(self, prefix: str) -> None:
        if self.name is None:
            return
        if self.split == "random" and self.val + self.test >= 1.0:
            raise ConfigError(f"{prefix}.test", self.test, f"< {1.0 - self.val:g} (val + test must leave training pairs)")
        if self.window is not None and self.split != "temporal":
            raise ConfigError(f"{prefix}.window", self.window, "null unless split=temporal")
        allowed = self.metric_names()
        if self.main_metric not in allowed:
            raise ConfigError(f"{prefix}.main_metric", self.main_metric, f"one of {allowed}")

    def metric_names(self) -> list[str]:
        return ["roc_auc", "mrr"] + [f"hits@{k}" for k in self.hits_k]
