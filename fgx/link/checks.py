"""Config-time checks of the link task, run by fgx.config.validate before any work: which task a run
has, and the combinations the link task cannot run (each refused with the key and what is allowed)."""
from __future__ import annotations

from fgx.errors import ConfigError

# the tasks of the datasets whose graph the link task can split into node pairs: node-classification
# graphs (Cora, ...) and link datasets (ogbl-collab, fgx/data/ogbl_collab.py)
LINK_SOURCES = ("node", "link")


def run_task(top, entries: dict) -> str | None:
    """The task a run has: ``task.name`` when set (``task=link``), else its dataset's."""
    return top.task.name or entries["dataset"].meta.get("task")


def check_link_dataset(top, names: dict, entries: dict) -> None:
    """The dataset of a ``task=link`` run (and the task of a link dataset): checked before the components'
    tasks (fgx.config._check_tasks), so a dataset the task cannot use is named first."""
    from fgx.registry import DATASETS

    own = entries["dataset"].meta.get("task")
    if own == "link" and top.task.name != "link":
        raise ConfigError("task", top.task.name, f"link (dataset '{names['dataset']}' is a link-prediction dataset: "
                                                 f"run it with task=link)")
    if top.task.name != "link":
        return
    if own not in LINK_SOURCES:
        raise ConfigError("dataset.name", names["dataset"], f"a graph the link task can split into node pairs (a "
                                                            f"dataset of task {list(LINK_SOURCES)}; '{names['dataset']}' "
                                                            f"has task {own!r})")
    if top.task.split == "temporal" and "edge_time" not in entries["dataset"].meta.get("provides", ()):
        have = [n for n in DATASETS.names() if "edge_time" in DATASETS.get(n).meta.get("provides", ())]
        raise ConfigError("task.split", "temporal", f"random, or a dataset with edge times: one of {have} "
                                                    f"('{names['dataset']}' has none)")


def check_link_config(top, params: dict, names: dict) -> None:
    """The rest of the config of a ``task=link`` run, once its components support the task."""
    if top.task.name != "link":
        return
    from fgx.federation.client import LocalTrainParams
    algo = params["algorithm"]
    if isinstance(algo, LocalTrainParams) and algo.fanouts:
        raise ConfigError("algorithm.fanouts", algo.fanouts, "null with task=link (each step scores the client's "
                                                             "pairs on its whole training graph)")
    if top.metrics is not None:
        raise ConfigError("metrics", top.metrics, f"null with task=link (its metrics are {top.task.metric_names()})")
    if top.main_metric is not None and top.main_metric not in top.task.metric_names():
        raise ConfigError("main_metric", top.main_metric, f"null or one of {top.task.metric_names()} with task=link "
                                                          f"(task.main_metric sets it too)")
    if top.eval.subset is not None:
        raise ConfigError("eval.subset", top.eval.subset, "null with task=link (each evaluation scores every pair: a "
                                                          "positive's rank needs all of its negatives)")
    if names["unlearning"] != "none":
        raise ConfigError("unlearning.name", names["unlearning"], "none with task=link (the unlearning methods delete "
                                                                  "nodes, edges or features of node and edge tasks)")
