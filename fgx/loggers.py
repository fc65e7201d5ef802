"""Optional metric streams beside the run directory's own files: ``logger=tensorboard`` writes
TensorBoard event files to ``<run dir>/tensorboard``; ``logger=mlflow`` logs to a local MLflow
file store ``<run dir>/mlruns`` (no server). The run directory stays the record; these are views."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

EXTRAS = {"tensorboard": ("tensorboard", "tensorboard"), "mlflow": ("mlflow", "mlflow")}


def missing_package(name: str) -> str | None:
    """The install hint when the logger's package is absent (checked at validation, before work)."""
    if name == "none":
        return None
    module, extra = EXTRAS[name]
    if importlib.util.find_spec(module) is None:
        return f"pip install 'fgx[{extra}]'"
    return None


class MetricLogger:
    def log(self, step: int, split: str, metrics: dict) -> None:
        pass

    def close(self) -> None:
        pass


class TensorBoardLogger(MetricLogger):
    def __init__(self, run_dir: Path, config: dict):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"))
        self.writer.add_text("config", "```\n" + _flat_text(config) + "\n```", 0)

    def log(self, step, split, metrics):
        for k, v in metrics.items():
            if isinstance(v, (int, float)) and v == v:
                self.writer.add_scalar(f"{split}/{k}", v, step)
        self.writer.flush()

    def close(self):
        self.writer.close()


class MlflowLogger(MetricLogger):
    def __init__(self, run_dir: Path, config: dict, experiment: str):
        # MLflow 3 keeps the plain-file store (no server, no database) behind an explicit opt-in
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        import mlflow

        self.uri = (run_dir / "mlruns").resolve().as_uri()
        self.client = mlflow.tracking.MlflowClient(tracking_uri=self.uri)
        exp = self.client.get_experiment_by_name(experiment)
        exp_id = exp.experiment_id if exp else self.client.create_experiment(experiment)
        self.run_id = self.client.create_run(exp_id, run_name=run_dir.name).info.run_id
        flat = flatten(config)
        for i in range(0, len(flat), 100):   # MLflow accepts at most 100 params per batch
            from mlflow.entities import Param
            self.client.log_batch(self.run_id, params=[Param(k, str(v)[:500]) for k, v in list(flat.items())[i:i + 100]])

    def log(self, step, split, metrics):
        from mlflow.entities import Metric
        import time

        now = int(time.time() * 1000)
        ms = [Metric(f"{split}/{k}".replace("@", "_at_"), float(v), now, step)
              for k, v in metrics.items() if isinstance(v, (int, float)) and v == v]
        if ms:
            self.client.log_batch(self.run_id, metrics=ms)

    def close(self):
        self.client.set_terminated(self.run_id)


def flatten(d: dict, prefix: str = "") -> dict:
    """A nested dict as dotted keys ({'a': {'b': 1}} -> {'a.b': 1})."""
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _flat_text(d: dict) -> str:
    return "\n".join(f"{k}: {v}" for k, v in flatten(d).items())


def make_logger(name: str, run_dir: Path, config: dict, experiment: str | None) -> MetricLogger:
    if name == "tensorboard":
        return TensorBoardLogger(run_dir, config)
    if name == "mlflow":
        return MlflowLogger(run_dir, config, experiment or "fgx")
    return MetricLogger()
