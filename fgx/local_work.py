"""How much local training a round is, said once at the start of every run: `rounds=20` is 200 gradient
steps per client for FedAvg (local_steps 10) and 20 for FedGSP (local_steps 1), and a reader comparing
them should know. Read from the algorithm's params (`local_steps`, `local_epochs`, `batch_size`, the
gossip methods' `b`); an algorithm without such a setting says so."""
from __future__ import annotations

from fgx.tasks import ITEM_PREFIX


def train_items(client, task: str) -> int | None:
    """The training items a client holds (nodes, edges incl. cross-client ones, graphs); None for tasks
    whose data is not a graph with train masks (ranking, regression)."""
    d, prefix = client.data, ITEM_PREFIX.get(task, "")
    mask = getattr(d, prefix + "train_mask", None)
    if mask is None or task not in ("node", "edge", "graph"):
        return None
    n = int(mask[: client.num_owned].sum()) if task == "node" else int(mask.sum())
    cross = getattr(d, "cross_edge_train_mask", None) if task == "edge" else None
    return n + (int(cross.sum()) if cross is not None else 0)


def describe(name: str, params, clients: list, task: str) -> dict:
    """``{"text": one line, "steps": (least, most) gradient steps per client per round or None}``."""
    steps_set = getattr(params, "local_steps", None)
    epochs, batch = getattr(params, "local_epochs", None), getattr(params, "batch_size", None)
    how = "full batch" if batch is None else f"batches of {batch}"
    if epochs is not None:
        counts = [train_items(c, task) for c in clients]
        if batch is None:
            steps = (epochs, epochs)
        elif None not in counts and counts:
            per = [epochs * max(1, -(-n // batch)) for n in counts]
            steps = (min(per), max(per))
        else:
            steps = None
        text = f"{epochs} pass(es) over each client's training items per round ({how}; algorithm.local_epochs)"
    elif steps_set is not None:
        steps = (steps_set, steps_set)
        text = f"{steps_set} gradient step(s) per client per round ({how}; algorithm.local_steps)"
    elif getattr(params, "b", None) is not None and getattr(params, "k", None) is not None:
        steps = (1, 1)
        text = f"one gradient step per node per round, on one of its {params.b} batches (rounds = k·b)"
    else:
        return {"text": f"algorithm {name} has no local-steps setting: its own schedule per round "
                        f"(conf/algorithm/{name}.yaml)", "steps": None}
    if steps is not None and epochs is not None:
        text += f" = {steps[0]}" + (f"-{steps[1]}" if steps[1] != steps[0] else "") + " gradient step(s) per client"
    return {"text": text, "steps": list(steps) if steps else None}
