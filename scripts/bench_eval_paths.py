"""The two evaluation paths on one trained CE-FedGNN model (issue #41): the test transactions of a
fixed random subset per bank scored layer-wise with every scored edge marked (what the complete
evaluation computes), layer-wise with only the subset marked, and sampled in batches; metrics over
the subset, each path's time, and the predicted positives.

    python scripts/bench_eval_paths.py --checkpoint <run dir>/checkpoint.pt --data-dir <data root>   # [HI-Small: ~7 min]

The checkpoint must come from `fgx run algorithm=ce_fedgnn dataset=<--dataset>` at the defaults this
script rebuilds (GINe, 4 banks, batch 512, fanouts [10, 10])."""
from __future__ import annotations

import argparse
import json
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--dataset", default="aml_hi_small")
    ap.add_argument("--subset", type=int, default=20000, help="test transactions per bank")
    a = ap.parse_args()

    import torch
    from omegaconf import open_dict

    import bench_aml_scale
    from fgx.algorithms.base import eval_items
    from fgx.metrics import grouped_classification_metrics

    args = types.SimpleNamespace(dataset=a.dataset, scale=1.0, model="gine", clients=4, batch_size=512,
                                 fanouts=[10, 10], steps=8, seed=0, eval_batch_size=8192, data_dir=a.data_dir,
                                 overrides=[])
    _, algo, _, _ = bench_aml_scale.build(args)
    ck = torch.load(a.checkpoint, weights_only=False)
    algo.load_state_dict(ck["algorithm"])
    out = {"checkpoint_round": ck["round"], "subset_per_bank": a.subset}
    for mode in ("layerwise_all_scored_marked", "layerwise_subset_marked", "sampled"):
        with open_dict(algo.ctx.cfg):
            algo.ctx.cfg.eval.inference = "sampled" if mode == "sampled" else "layerwise"
        S, Y = [], []
        t = time.time()
        for c in algo.ctx.clients:
            if mode == "layerwise_all_scored_marked":
                full = algo.predict(c, splits=("test",), subset=None)["test"]
                view = algo.clients[c.cid].view
                every = eval_items(view, "edge", ("test",), None, 0, c.cid)["test"][0]
                sub = eval_items(view, "edge", ("test",), a.subset, 0, c.cid)["test"][0]
                pos = torch.searchsorted(every, sub)
                s, y = full[0][pos], full[1][pos]
            else:
                s, y = algo.predict(c, splits=("test",), subset=a.subset, batch_size=8192)["test"]
            S.append(s)
            Y.append(y)
        S, Y = torch.cat(S), torch.cat(Y)
        m = grouped_classification_metrics(S, Y, torch.zeros_like(Y), 1, 2, 1, ("accuracy", "f1_minority", "roc_auc"))[0]
        out[mode] = {**{k: round(v, 4) for k, v in m.items()}, "s": round(time.time() - t, 1),
                     "predicted_positives": int((S.argmax(1) == 1).sum()), "positives": int(Y.sum())}
        print(mode, json.dumps(out[mode]), flush=True)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
