"""FedAvg+GCN as FED-PUB's own code trains it (JinheonBaek/FED-PUB: models/nets.py GCN, models/fedavg/
client.py and server.py, main.py set_config), written here with plain PyG on fgx's clients, beside
`fgx run` of the same cell (#37 point 6: does fgx's FedGSP protocol train its GCN baselines at least
as well as the authors' code?).

The loop, as the authors' code runs it: GCN = GCNConv(F, 128) -> ReLU -> dropout -> GCNConv(128, 128)
-> ReLU -> dropout -> Linear(128, C); every client keeps its own Adam (lr, weight decay from the
table) across rounds; each round it loads the global weights, takes ``--epochs`` full-batch steps
on its own subgraph (its nodes, the edges between them), is evaluated on its validation and test
nodes right after, and the server averages the weights by training-set size. Same clients, split
and seed as the fgx run (fgx's dataset and partitioner build them); PyTorch's initialisation.

    python scripts/peers/fedpub_fedavg.py --data-dir ../shared/data                 # Cora disj_10, seed 0
    python scripts/peers/fedpub_fedavg.py --data-dir ../shared/data --seeds 0 1 2 --rounds 100

Prints, per round, the mean over clients of the local validation accuracy for both, and one JSON
line: each side's curve and its best-client score (each client's test accuracy at its own best
validation round, the FedGSP tables' metric).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def clients_of(overrides: list[str]):
    """fgx's dataset, partition and hyperparameters of the cell, as (clients, lr, weight decay, hidden)."""
    from fgx.cli import compose
    from fgx.config import default_data_dir, validate
    from fgx.data.base import DataEnv
    from fgx.partition.base import build_clients
    from fgx.trainer import log

    v = validate(compose(overrides))
    ds = v.entries["dataset"].obj(v.params["dataset"], DataEnv(data_dir=Path(v.top.data_dir or default_data_dir()), seed=v.top.seed, log=log))
    parts = v.entries["partitioner"].obj(v.params["partitioner"], ds.data, ds.info, v.top.seed)
    alg, model = v.params["algorithm"], v.params["model"]
    return build_clients(ds.data, ds.info, parts), ds.info.num_classes, alg.lr, alg.weight_decay, model.hidden


def fedpub_loop(clients, num_classes: int, lr: float, wd: float, hidden: int, rounds: int, epochs: int,
                seed: int) -> list[dict]:
    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch_geometric.nn import GCNConv

    class GCN(nn.Module):                  # models/nets.py GCN of the authors' code
        def __init__(self, n_feat, n_dims, n_clss):
            super().__init__()
            self.conv1, self.conv2 = GCNConv(n_feat, n_dims), GCNConv(n_dims, n_dims)
            self.clsif = nn.Linear(n_dims, n_clss)

        def forward(self, x, ei):
            x = F.dropout(F.relu(self.conv1(x, ei)), training=self.training)
            x = F.dropout(F.relu(self.conv2(x, ei)), training=self.training)
            return self.clsif(x)

    torch.manual_seed(seed)
    views = []
    for c in clients:
        d, n = c.data, c.num_owned
        views.append({"x": d.x[:n], "ei": d.edge_index, "y": d.y[:n],
                      **{m: getattr(d, f"{m}_mask")[:n] for m in ("train", "val", "test")}})
    server = GCN(views[0]["x"].size(1), hidden, num_classes)
    models = [GCN(views[0]["x"].size(1), hidden, num_classes) for _ in views]
    opts = [torch.optim.Adam(m.parameters(), lr=lr, weight_decay=wd) for m in models]
    sizes = torch.tensor([float(v["train"].sum()) for v in views])
    ratio = sizes / sizes.sum()
    curve = []
    for r in range(1, rounds + 1):
        for m, o, v in zip(models, opts, views):
            m.load_state_dict(server.state_dict())
            m.train()
            for _ in range(epochs):
                o.zero_grad()
                F.cross_entropy(m(v["x"], v["ei"])[v["train"]], v["y"][v["train"]]).backward()
                o.step()
        accs = {"val": [], "test": []}
        for m, v in zip(models, views):
            m.eval()
            with torch.no_grad():
                pred = m(v["x"], v["ei"]).argmax(1)
            for split in accs:
                mask = v[split]
                accs[split].append(float((pred[mask] == v["y"][mask]).float().mean()) if mask.any() else float("nan"))
        curve.append({"round": r, **accs})
        state = {k: sum(w * m.state_dict()[k] for w, m in zip(ratio, models)) for k in server.state_dict()}
        server.load_state_dict(state)
    return curve


def fgx_curve(overrides: list[str], work: Path) -> list[dict]:
    d = work / "fgx"
    subprocess.run([sys.executable, "-m", "fgx.cli", "run", *overrides, f"hydra.run.dir={d}", "output.progress=off",
                    "output.checkpoint=false"], check=True, capture_output=True, cwd=REPO)
    rows = {}
    for line in (d / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row.get("split") in ("val", "test") and "per_client" in row:
            rows.setdefault(row["round"], {"round": row["round"]})[row["split"]] = [c.get("accuracy") for c in row["per_client"]]
    return [rows[k] for k in sorted(rows)]


def best_client(curve: list[dict]) -> float:
    """Each client's test accuracy at its own best validation round (the first best), averaged."""
    m = len(curve[0]["val"])
    out = []
    for c in range(m):
        best = max(range(len(curve)), key=lambda i: (curve[i]["val"][c], -i))
        out.append(curve[best]["test"][c])
    return sum(out) / m


def mean(xs):
    return sum(xs) / len(xs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default="../shared/data")
    ap.add_argument("--experiment", default="fedgsp_cora_disj_10")
    ap.add_argument("--method", default="fedavg_gcn")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--epochs", type=int, default=1, help="local full-batch epochs per round (FED-PUB --n-eps)")
    ap.add_argument("fgx_overrides", nargs="*", help="extra overrides for both sides (e.g. algorithm.lr=0.05)")
    a = ap.parse_args()
    out = {"experiment": a.experiment, "method": a.method, "rounds": a.rounds, "epochs": a.epochs, "seeds": {}}
    for seed in a.seeds:
        over = [f"+experiment={a.experiment}", f"method={a.method}", f"seed={seed}", f"data_dir={Path(a.data_dir).resolve()}",
                f"rounds={a.rounds}", f"algorithm.local_steps={a.epochs}", *a.fgx_overrides]
        clients, k, lr, wd, hidden = clients_of(over)
        ref = fedpub_loop(clients, k, lr, wd, hidden, a.rounds, a.epochs, seed)
        with tempfile.TemporaryDirectory() as tmp:
            fgx = fgx_curve(over, Path(tmp))
        print(f"seed {seed}: lr {lr}, weight decay {wd}, hidden {hidden}; mean local validation accuracy by round",
              file=sys.stderr)
        for r, f in zip(ref, fgx):
            if r["round"] in (1, 2, 5) or r["round"] % 10 == 0:
                print(f"  round {r['round']:4d}  FED-PUB loop {mean(r['val']):.4f}  fgx {mean(f['val']):.4f}", file=sys.stderr)
        out["seeds"][seed] = {"fedpub_loop": {"best_client_accuracy": round(best_client(ref), 4),
                                              "val_mean_by_round": [round(mean(r["val"]), 4) for r in ref]},
                              "fgx": {"best_client_accuracy": round(best_client(fgx), 4),
                                      "val_mean_by_round": [round(mean(f["val"]), 4) for f in fgx]}}
        print(f"  best-client test accuracy: FED-PUB loop {best_client(ref):.4f}, fgx {best_client(fgx):.4f}", file=sys.stderr)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
