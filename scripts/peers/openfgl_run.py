"""Run one OpenFGL (openfgl-lib) experiment on a partition written by scripts/bench_peers.py.

Runs under the peer's interpreter (the venv where openfgl-lib is installed), never imports fgx, and
is started as its own process by the benchmark: OpenFGL parses sys.argv when ``openfgl.config`` is
imported, so argv is emptied first and the run is configured through its ``args`` namespace.

Input (``--clients``, a torch file written by the benchmark and read by fgx's partitioner=file too):
``client`` (the client of every node, -1: none) and the ``train_mask``/``val_mask``/``test_mask`` fgx uses. From it this script writes the files
OpenFGL reads instead of simulating its own partition (``distrib/.../data_<i>.pt`` and its split
files), with the global Planetoid raw files copied from ``--data-dir``: OpenFGL then downloads and
partitions nothing. Output (``--out``, JSON): start-up and training-loop seconds, and the final test
accuracy of every client under ``--eval-model`` (local: each client's model after its local step,
OpenFGL's local_model_on_local_data; global: the server's model on each client's data), and the seconds of
every round without its evaluation (``round_s``; OpenFGL evaluates every client after every round).

``--scenario link`` (issue #71): OpenFGL's link_pred task on the same clients. With ``link`` entries in the
clients file (fgx's split of each client's pairs: its training graph, labelled pairs, split masks), they are
written as OpenFGL's own link_pred split files, so both tools train and score the same pairs; without them
OpenFGL draws its own split. Output adds the test ROC-AUC pooled over all clients' test pairs and, per
client, how many test positives are in the message-passing graph OpenFGL trains and scores on
(``test_positives_in_graph``: OpenFGL 1.1.0's own split builds that graph from ``edge_index[:, ids]`` with
ids that index its de-duplicated pair list, not the edge list, so held-out pairs reach it).

``--graph`` (scripts/bench_scale.py): the global graph is a torch file fgx wrote (``x``, ``edge_index``,
``y`` of a generated graph) instead of a dataset's raw files; OpenFGL's global-dataset loader is
given it, and ``--dataset`` (a name OpenFGL accepts) only names OpenFGL's folders."""
from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path

ALGORITHMS = {"fedavg": "fedavg", "fedprox": "fedprox", "local": "isolate", "fedsage_plus": "fedsage_plus",
              "fedpub": "fedpub", "gcfl_plus": "gcfl_plus", "fedstar": "fedstar"}


def process_start_time() -> float | None:
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


SPLITS = ("train", "val", "test")


def save_client(processed: Path, split_dir: Path, cid: int, sub, ids, masks: dict) -> None:
    """One client's data file and its split as OpenFGL reads them: masks over the client's items
    (``masks[split][ids]``) and the global ids of each split's items."""
    import torch

    torch.save(sub, processed / f"data_{cid}.pt")
    for split in SPLITS:
        mask = masks[split][ids].clone()
        torch.save(mask, split_dir / f"{split}_{cid}.pt")
        with open(split_dir / f"glb_{split}_{cid}.pkl", "wb") as f:
            pickle.dump(ids[mask].tolist(), f)


class GeneratedGlobal:
    """A generated graph in the shape OpenFGL's ``load_global_dataset`` returns for a node dataset (its
    ``data``, ``num_classes`` and ``[0]``)."""

    def __init__(self, path: Path):
        import torch
        from torch_geometric.data import Data

        g = torch.load(path, weights_only=True)
        self.data = Data(x=g["x"], edge_index=g["edge_index"], y=g["y"])
        self.num_classes = int(g["y"].max()) + 1

    def __getitem__(self, i: int):
        return self.data


def write_openfgl_files(args, clients_file: Path, data_dir: Path, dataset: str, graph: Path | None = None) -> None:
    """OpenFGL's own on-disk layout for the given clients: its FGLDataset then finds them "processed"."""
    import torch
    from torch_geometric.data import Data
    from openfgl.data.distributed_dataset_loader import FGLDataset

    spec = torch.load(clients_file, weights_only=True)
    if graph is not None:
        glob = GeneratedGlobal(graph)
    else:
        raw_src = data_dir / dataset / "raw"
        raw_dst = Path(args.root) / "global" / "subgraph_fl" / dataset / "raw"
        if not raw_dst.exists():
            raw_dst.mkdir(parents=True)
            for f in raw_src.iterdir():
                shutil.copy(f, raw_dst / f.name)
        from openfgl.data.global_dataset_loader import load_global_dataset
        glob = load_global_dataset(str(Path(args.root) / "global"), scenario="subgraph_fl", dataset=dataset)
    data = glob[0]
    owner = spec["client"]
    if owner.numel() != data.num_nodes:
        raise SystemExit(f"{clients_file}: {owner.numel()} nodes, OpenFGL's {dataset} has {data.num_nodes}")
    # the processed_dir property needs only args: make an instance without running its __init__
    processed = Path(FGLDataset.processed_dir.fget(type("A", (), {"args": args, "distrib_root":
                                                                 str(Path(args.root) / "distrib")})()))
    split_dir = processed / "node_cls" / "default_split"
    split_dir.mkdir(parents=True, exist_ok=True)
    k = int(owner.max()) + 1
    ei = data.edge_index
    for cid in range(k):
        nodes = (owner == cid).nonzero().view(-1)            # sorted by global id, as fgx's clients
        local = torch.full((data.num_nodes,), -1, dtype=torch.long)
        local[nodes] = torch.arange(nodes.numel())
        inside = (local[ei[0]] >= 0) & (local[ei[1]] >= 0)
        sub = Data(x=data.x[nodes], edge_index=local[ei[:, inside]], y=data.y[nodes])
        sub.global_map = {i: int(g) for i, g in enumerate(nodes.tolist())}
        sub.num_global_classes = int(data.y.max()) + 1
        save_client(processed, split_dir, cid, sub, nodes, {s: spec[f"{s}_mask"] for s in SPLITS})


def write_openfgl_link_files(args, clients_file: Path) -> None:
    """fgx's link split of each client as OpenFGL's link_pred files (LinkPredTask.load_train_val_test_split
    reads them instead of drawing its own): the training graph, the labelled pairs (local and global ids),
    their labels and split masks."""
    import torch
    from torch_geometric.data import Data
    from openfgl.data.distributed_dataset_loader import FGLDataset

    spec = torch.load(clients_file, weights_only=True)
    processed = Path(FGLDataset.processed_dir.fget(type("A", (), {"args": args, "distrib_root":
                                                                 str(Path(args.root) / "distrib")})()))
    out = processed / "link_pred" / "default_split"       # LinkPredTask.train_val_test_path
    out.mkdir(parents=True, exist_ok=True)
    for cid, c in enumerate(spec["link"]):
        sub = torch.load(processed / f"data_{cid}.pt", weights_only=True)
        torch.save(Data(x=sub.x, edge_index=c["graph"], y=sub.y), out / f"forward_data_{cid}.pt")
        torch.save(c["pairs"], out / f"merged_edge_index_{cid}.pt")
        torch.save(c["label"].float(), out / f"merged_edge_label_{cid}.pt")
        for split, name in (("train", "train"), ("val", "val"), ("test", "test")):
            torch.save(c[split], out / f"merged_edge_{name}_{cid}.pt")
        torch.save(c["global_pairs"], out / f"glb_merged_edge_index_{cid}.pkl")


def link_results(trainer, eval_model: str) -> tuple[float, list[dict]]:
    """Test ROC-AUC pooled over every client's test pairs under ``eval_model``, and per client its own
    ROC-AUC, its test pairs and the test positives found in the graph it is scored on."""
    import torch
    from sklearn.metrics import roc_auc_score

    scores, labels, rows = [], [], []
    for c in trainer.clients:
        task = c.task
        res = task.evaluate(mute=True) if eval_model == "local" else trainer.server.task.evaluate(task.splitted_data,
                                                                                                 mute=True)
        test = task.merged_edge_test_mask
        y = task.merged_edge_label[test]
        scores.append(res["logits"][test].detach().cpu())
        labels.append(y.cpu())
        graph = {tuple(e) for e in task.forward_data.edge_index.t().tolist()}
        pos = task.merged_edge_index[:, test & (task.merged_edge_label == 1)].t().tolist()
        rows.append({"auc": float(res["auc_test"]), "test_nodes": int((y == 1).sum()),
                     "test_positives_in_graph": sum(1 for u, v in pos if (u, v) in graph or (v, u) in graph)})
    return float(roc_auc_score(torch.cat(labels).numpy(), torch.cat(scores).numpy())), rows


def write_openfgl_graph_files(args, clients_file: Path, data_dir: Path, dataset: str) -> None:
    """Graph level: each client's graphs as OpenFGL's graph_fl simulations save them (a subset of its
    TUDataset with ``num_global_classes`` and ``global_map``) and the written split by graph."""
    import torch
    from openfgl.data.distributed_dataset_loader import FGLDataset
    from openfgl.data.global_dataset_loader import load_global_dataset

    spec = torch.load(clients_file, weights_only=True)
    raw_dst = Path(args.root) / "global" / "graph_fl" / dataset / "raw"
    if not raw_dst.exists():
        raw_dst.mkdir(parents=True)
        for f in (data_dir / dataset / "raw").iterdir():
            shutil.copy(f, raw_dst / f.name)
    glob = load_global_dataset(str(Path(args.root) / "global"), scenario="graph_fl", dataset=dataset)
    owner = spec["graph_client"]
    if owner.numel() != len(glob):
        raise SystemExit(f"{clients_file}: {owner.numel()} graphs, OpenFGL's {dataset} has {len(glob)}")
    processed = Path(FGLDataset.processed_dir.fget(type("A", (), {"args": args, "distrib_root":
                                                                 str(Path(args.root) / "distrib")})()))
    split_dir = processed / "graph_cls" / "default_split"
    split_dir.mkdir(parents=True, exist_ok=True)
    for cid in range(int(owner.max()) + 1):
        ids = (owner == cid).nonzero().view(-1)             # sorted by global id, as fgx's clients
        sub = glob.copy(ids)
        sub.num_global_classes = glob.num_classes
        sub.global_map = {i: int(g) for i, g in enumerate(ids.tolist())}
        save_client(processed, split_dir, cid, sub, ids, {s: spec[f"graph_{s}_mask"] for s in SPLITS})


def allow_pyg_data_in_torch_load() -> None:
    """OpenFGL 1.1.0 reads its client files with a bare torch.load, which torch >= 2.6 runs with
    weights_only=True: PyG's Data classes must be allow-listed (the files are the ones written above)."""
    import torch
    from torch_geometric.data import Data
    from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
    from torch_geometric.data.storage import GlobalStorage

    torch.serialization.add_safe_globals([Data, DataEdgeAttr, DataTensorAttr, GlobalStorage])


def pooled_accuracy(trainer, eval_model: str) -> tuple[float, list[dict]]:
    """Test accuracy of every client under ``eval_model`` and the pooled value (all clients' test nodes)."""
    rows = []
    for c in trainer.clients:
        if eval_model == "local":
            res = c.task.evaluate(mute=True)
        else:
            res = trainer.server.task.evaluate(c.task.splitted_data, mute=True)
        n_test = int(c.task.test_mask.sum())
        rows.append({"accuracy": float(res["accuracy_test"]), "test_nodes": n_test})   # graph level: test graphs
    total = sum(r["test_nodes"] for r in rows)
    return sum(r["accuracy"] * r["test_nodes"] for r in rows) / max(total, 1), rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--root", required=True, help="OpenFGL's data root (written here)")
    ap.add_argument("--data-dir", required=True, help="fgx data root with <dataset>/raw")
    ap.add_argument("--clients", required=True, help="torch file: owner + split masks (scripts/bench_peers.py)")
    ap.add_argument("--dataset", default="Cora")
    ap.add_argument("--algorithm", required=True, choices=sorted(ALGORITHMS))
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--epochs", type=int, default=1, help="local epochs per round (full batch: steps)")
    ap.add_argument("--num-clients", type=int, required=True)
    ap.add_argument("--eval-model", choices=["local", "global"], default="local")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prepare-only", action="store_true", help="write OpenFGL's files and stop")
    ap.add_argument("--scenario", choices=["node", "graph", "link"], default="node",
                    help="node: subgraph_fl node classification; graph: graph_fl graph classification; link: "
                         "subgraph_fl link prediction")
    ap.add_argument("--graph", default=None, help="torch file of a generated global graph (x, edge_index, y)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    started = process_start_time()
    sys.argv = sys.argv[:1]          # OpenFGL parses argv at import
    import torch
    from openfgl.config import args

    args.root = a.root
    args.dataset = [a.dataset]
    args.simulation_mode = "graph_fl_topology_skew" if a.scenario == "graph" else "subgraph_fl_louvain"
    if a.scenario == "graph":      # the files written below replace the simulation (its name only names the folder)
        args.scenario, args.task = "graph_fl", "graph_cls"
    if a.scenario == "link":
        args.task = "link_pred"
    args.num_clients = a.num_clients
    args.num_rounds = a.rounds
    args.num_epochs = a.epochs
    args.fl_algorithm = ALGORITHMS[a.algorithm]
    args.model = ["gin" if a.scenario == "graph" else "gcn"]
    args.metrics = ["auc"] if a.scenario == "link" else ["accuracy"]
    args.evaluation_mode = f"{a.eval_model}_model_on_local_data"
    args.use_cuda = False
    args.seed = a.seed
    if a.prepare_only:
        if a.scenario == "graph":
            write_openfgl_graph_files(args, Path(a.clients), Path(a.data_dir), a.dataset)
        else:
            write_openfgl_files(args, Path(a.clients), Path(a.data_dir), a.dataset, a.graph and Path(a.graph))
        if a.scenario == "link" and "link" in torch.load(a.clients, weights_only=True):
            allow_pyg_data_in_torch_load()
            write_openfgl_link_files(args, Path(a.clients))
        return 0
    if a.scenario == "graph":
        # OpenFGL 1.1.0 reads a client's graphs (a pickled TUDataset subset, the files written above by this
        # script) with a bare torch.load, which torch >= 2.6 runs with weights_only=True
        os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"

    from openfgl.flcore.trainer import FGLTrainer
    from openfgl.utils.basic_utils import seed_everything
    allow_pyg_data_in_torch_load()
    if a.graph:
        import openfgl.data.distributed_dataset_loader as loader
        loader.load_global_dataset = lambda *_, **__: GeneratedGlobal(Path(a.graph))

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads())))
    seed_everything(a.seed)
    with open(os.devnull, "w") as sink, redirect_stdout(sink):   # OpenFGL prints every client every round
        trainer = FGLTrainer(args)
        round_s, eval_s, evaluate = [], [], trainer.evaluate

        def timed_evaluate():      # the end of every round: its time without the evaluation
            t = time.perf_counter()
            evaluate()
            eval_s.append(time.perf_counter() - t)
            round_s.append(t - marks[-1])
            marks.append(time.perf_counter())

        trainer.evaluate = timed_evaluate
        t_loop = time.time()
        marks = [time.perf_counter()]
        trainer.train()
        loop_s = time.time() - t_loop
        acc, rows = link_results(trainer, a.eval_model) if a.scenario == "link" else pooled_accuracy(trainer, a.eval_model)
    Path(a.out).write_text(json.dumps({
        "startup_s": t_loop - started if started else None, "train_time_s": loop_s,
        ("roc_auc" if a.scenario == "link" else "accuracy"): acc,
        "round_s": round_s, "eval_s": eval_s,
        "per_client": rows, "openfgl_algorithm": args.fl_algorithm, "eval_model": a.eval_model}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
