"""``unlearning=scalegun``: lazy local propagation + one Newton step per deletion request + the
certificate accountant (ScaleGUN, Algorithm 1), run after ``algorithm=certified_lr`` has trained, on
its clients' propagation states. A request is routed to the clients that hold the deleted items and
only they update their state. The baselines (``cgu``, ``ceu``, ``retrain``) reuse this machinery.

Accountant (per class of the one-vs-rest model): beta_c accumulates, per Newton step,
gamma2 ||Z'|| ||H^-1 Delta_c|| ||Z' H^-1 Delta_c|| plus the step's own solve residual ||H v - Delta||;
the approximation term 2 c1 (||1^T R|| + the state's rounding bound) plus the training gradient norm is
added fresh each time. The bound of W + v is computed *before* it is released: when any class would
exceed the budget alpha eps / sqrt(2 log(1.5/delta)), W + v is never released; every client re-propagates
exactly (residues reset to zero) and the model is trained from scratch with fresh noise, so the bound
restarts at the rounding and training terms; if even that exceeds the budget the request is refused
and the run stops processing requests (the log and the summary say so). With
``certificate.enforce=false`` nothing is retrained and every release above the budget is flagged.

Each request's time is split into propagation (the embedding update and the client's training rows),
model update (Delta from the changed rows, the Newton solve) and certificate (||Z'||, ||Z' v||, residue
sums, accountant); with ``report.bounds`` the worst-case bounds and the true gradient norm on exact
embeddings are added (timed apart, ``report_s``, not in ``total_s``)."""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np

from fgx.config import ConfigError, spec
from fgx.registry import UNLEARNING
from fgx.unlearning.base import UnlearningMethod
from fgx.unlearning.bounds import WorstCaseAccumulator, embedding_change, worst_case
from fgx.unlearning.certified import C1, GAMMA1, GAMMA2, certificate_budget
from fgx.unlearning import attacks
from fgx.unlearning.backdoor_remedy import BackdoorAttack, BackdoorParams
from fgx.unlearning.requests import edge_mia, inject_adversarial, make_requests


@dataclass
class RequestParams:
    type: str = field(default="edge", metadata=spec(choices=["edge", "node", "feature"]))
    selection: str = field(default="random", metadata=spec(
        choices=["random", "vulnerable", "adversarial", "backdoor"],
        help="random items; vulnerable: edges of low-degree test nodes to same-label neighbours; "
             "adversarial: inject edges between differently labelled nodes, train, then remove them; "
             "backdoor (node requests): poison training nodes with a feature trigger and the target label "
             "(unlearning.backdoor), train, then remove them"))
    batch_size: int = field(default=1, metadata=spec(min=1, help="items per request"))
    num_requests: int = field(default=10, metadata=spec(min=1))
    max_degree: int = field(default=5, metadata=spec(min=1, help="vulnerable: test nodes with fewer neighbours"))
    num_add: int = field(default=500, metadata=spec(min=1, help="adversarial: edges injected before training"))


@dataclass
class CertificateParams:
    epsilon: float = field(default=1.0, metadata=spec(gt=0.0))
    delta: float = field(default=1e-4, metadata=spec(gt=0.0, max=1.0))
    include_approx_term: bool = field(default=True, metadata=spec(
        help="add 2 c1 ||1^T R|| (paper); false = the reference code's check"))
    include_train_residual: bool = field(default=True, metadata=spec(
        help="add the training gradient norm (the optimum is reached only to tolerance)"))
    residue_norm: str = field(default="theorem", metadata=spec(
        choices=["theorem", "paper_estimate"],
        help="theorem: c1 ||s|| + gamma1 ||Z'|| |w|^T s with s the column sums of |residues| and the rounding "
             "bounds (a bound for signed features and either sign of l', docs/unlearning.md Theorem 1); "
             "paper_estimate: the paper's 2 c1 ||1^T R|| with signed residues - the paper's estimate, not a "
             "bound in general (two opposite components cancel it to 0)"))
    spectral_norm: str = field(default="auto", metadata=spec(
        choices=["auto", "gram", "incremental"],
        help="||Z'|| from above: gram = the server keeps the aggregated F x F Gram (clients send its change), "
             "LAPACK's top eigenvalue + a rounding margin every request; incremental = that value at a "
             "refresh, plus each request's ||Z' - Z|| (triangle inequality), refreshed past spectral_slack; "
             "auto = gram up to F = 512"))
    spectral_slack: float = field(default=0.1, metadata=spec(
        gt=0.0, help="incremental: refresh the exact ||Z'|| when the bound exceeds it by this fraction"))
    enforce: bool = field(default=True, metadata=spec(
        help="retrain when the bound exceeds the budget; false: only report (the paper's Fig. 2, alpha = 0)"))


@dataclass
class ReportParams:
    bounds: bool = field(default=False, metadata=spec(
        help="per request: worst-case bounds (Theorems 4.2-4.4, main-text and intermediate forms) and the "
             "true gradient norm on exactly propagated embeddings (a full exact propagation per request)"))


@dataclass
class CertifiedUnlearningParams:
    requests: RequestParams = field(default_factory=RequestParams)
    certificate: CertificateParams = field(default_factory=CertificateParams)
    report: ReportParams = field(default_factory=ReportParams)
    solver: str = field(default="cg", metadata=spec(
        choices=["cg", "hessian", "factored"],
        help="cg: Hessian-vector products over the training rows (one round each); hessian: clients send F x F "
             "Hessians (one round); factored: Cholesky factors of an anchor Hessian, corrected by the changed "
             "rows only, its curvature drift bounded in the certificate (fgx/unlearning/factored.py)"))
    eval_every: int = field(default=1, metadata=spec(
        min=1, help="test accuracy every N requests (and after the last); retrain: re-propagates and retrains there"))
    mia: bool = field(default=True, metadata=spec(help="edge requests: deleted-edge membership-inference AUC"))
    attacks: bool = field(default=True, metadata=spec(
        help="after the last request: link stealing (posterior, feature similarity), LinkTeller and the "
             "before/after difference attacks on the removed edges, or membership inference and the difference "
             "attack on the deleted nodes, for the unlearned model, a model retrained from scratch on exact "
             "embeddings and the never-updated model (fgx/unlearning/attacks.py)"))
    seed_offset: int = field(default=0, metadata=spec(help="added to the run seed to draw the requests"))
    backdoor: BackdoorParams = field(default_factory=BackdoorParams)


class CertifiedUnlearning(UnlearningMethod):
    exact = False        # embeddings re-propagated exactly after each request
    newton = True        # Newton step + accountant (False: retrain after every request)
    influence = False    # Newton step with the Hessian of the data before the request (CEU)

    @classmethod
    def check_config(cls, params, validated) -> None:
        if validated.names.get("algorithm") != "certified_lr":
            raise ConfigError("algorithm.name", validated.names.get("algorithm"),
                              f"certified_lr (unlearning={cls.name} unlearns the certified linear model)")
        if cls.newton and params.certificate.enforce and validated.params["algorithm"].noise_std == 0:
            raise ConfigError("unlearning.certificate.enforce", True,
                              "false when algorithm.noise_std = 0: the budget alpha eps / sqrt(2 log(1.5/delta)) is 0, "
                              "so no model can be certified (set certificate.enforce=false to only report the bounds, "
                              "as the paper's Fig. 2 does, or a noise_std > 0)")
        if params.requests.selection == "backdoor" and params.requests.type != "node":
            raise ConfigError("unlearning.requests.type", params.requests.type,
                              "node with requests.selection=backdoor (the poisoned training nodes are removed)")

    def run(self, ctx, algorithm) -> dict:
        p = self.params
        algo, server = algorithm, algorithm.server
        rng = np.random.default_rng([ctx.seed + p.seed_offset, 4099])
        server.round = ctx.rounds + 1
        out: dict = {"method": self.name, "requests_config": asdict(p), "setup": {}}
        injected = backdoor = None
        if p.requests.selection == "adversarial":
            out["setup"]["clean_test_accuracy"] = server.accuracy("test")
            injected = inject_adversarial(algo.parties, p.requests.num_add, rng)
            out["setup"]["injected_edges"] = int(sum(e.shape[1] for e in injected.values()))
            algo.build_propagation(exact=self.exact or algo.exact)
            algo.train(fresh_noise=False, warm_start=False)
        elif p.requests.selection == "backdoor":
            out["setup"]["clean_test_accuracy"] = server.accuracy("test")
            backdoor = BackdoorAttack.inject(algo.parties, p.backdoor, server.C, rng)
            injected = backdoor.items()
            out["setup"]["backdoor"] = backdoor.record()
            # the poisoned data goes through the run's whole path: preprocessing, propagation, training
            server.preprocess(algo.params.propagation.feature_norm, dtype=np.dtype(algo.params.propagation.dtype))
            backdoor.read_trigger(algo.parties)
            algo.build_propagation(exact=self.exact or algo.exact)
            algo.train(fresh_noise=False, warm_start=False)
        elif self.exact and not algo.exact:
            # the baselines start from exactly propagated embeddings and the model trained on them
            out["setup"]["exact_propagation_s"] = algo.build_propagation(exact=True)
            # same noise b as the run's model: the starting models differ only in propagation
            out["setup"]["train_s"] = algo.train(fresh_noise=False, warm_start=False)
        out["setup"].update(algo.propagation_info())
        out["setup"]["test_accuracy"] = server.accuracy("test")
        requests = make_requests(algo.parties, p.requests, rng, injected)
        budget = certificate_budget(server.noise_std, p.certificate.epsilon, p.certificate.delta)
        pairs = edge_mia(server, requests, rng) if (p.mia or p.attacks) and p.requests.type == "edge" else None
        mia_before = pairs if p.mia else None
        attack_state = attacks.prepare(server, requests, p.requests.type, pairs, rng) if p.attacks else None

        proc = self.processor(server, budget, algo)
        if self.newton:
            out["setup"].update(guarantee(p.certificate, server.C))
        if hasattr(proc, "initial"):
            out["setup"].update(proc.initial())
            if out["setup"]["repropagated"]:
                ctx.log.warning("%s: the trained model's bound %.3g exceeds the budget %.3g: re-propagated exactly "
                                "and retrained before the first request", self.name, out["setup"]["initial_bound"], budget)
                out["setup"]["test_accuracy"] = server.accuracy("test")
        remedy = {"before": backdoor.measure(server)} if backdoor is not None else None
        rows = []
        for i, req in enumerate(requests, start=1):
            if getattr(proc, "failed", False):
                ctx.log.error("%s: certificate failed: even after exact re-propagation and retraining the bound "
                              "exceeds the budget %.3g (lower algorithm.propagation.r_max, use "
                              "algorithm.propagation.dtype=float64, or raise algorithm.noise_std); requests %d-%d "
                              "are refused and not processed", self.name, budget, i, len(requests))
                break
            evaluate = i % p.eval_every == 0 or i == len(requests)
            row = {"request": i, **proc.process(req, evaluate)}
            rows.append(row)
            self.log_request(ctx, row, budget)
            if i % max(1, len(requests) // 10) == 0 or i == len(requests):
                acc = row["test_accuracy"]
                ctx.log.info("%s: request %d/%d test acc %s, retrains %d, %.3fs (prop %.4fs)", self.name, i,
                             len(requests), f"{acc:.4f}" if isinstance(acc, float) else acc, proc.retrains,
                             row["total_s"],
                             row["propagation_s"])
        if getattr(proc, "failed", False) and (not rows or rows[-1]["action"] == "refused"):
            ctx.log.error("%s: certificate failed at request %d of %d: no model within the budget %.3g could be "
                          "released", self.name, len(rows), len(requests), budget)
        out.update({"budget": float(budget), "requests": rows,
                    "summary": self.summary(rows, out["setup"], proc, budget)})
        s = out["summary"]
        s["requests_planned"] = len(requests)
        s["certificate_failed"] = bool(getattr(proc, "failed", False))
        if s.get("true_norm_violations"):
            ctx.log.error("%s: %d requests had a true gradient norm above their bound (certificate violated; each "
                          "was retrained or refused, see unlearning.json true_norm_violation)", self.name,
                          s["true_norm_violations"])
        if s.get("requests_outside_budget"):
            ctx.log.warning("%s: %d of %d released models were outside the certificate (largest bound %.3g, budget "
                            "%.3g; certificate.enforce=false)", self.name, s["requests_outside_budget"], len(rows),
                            s["max_released_bound"], budget)
        if mia_before is not None:
            out["summary"]["mia_auc_before"] = mia_before["auc"]
            out["summary"]["mia_auc_after"] = edge_mia(server, requests, rng, mia_before)["auc"]
        if remedy is not None:
            remedy["after"] = backdoor.measure(server)
        if attack_state is not None and rows and not s["certificate_failed"]:
            t0 = time.perf_counter()
            s.update(attacks.three_models(server, attack_state))
            s["attacks_s"] = time.perf_counter() - t0
            ctx.log.info("%s: attack AUCs, unlearned / retrained / never updated: %s", self.name, ", ".join(
                f"{k[:-len('_auc_unlearned')]} {s[k]:.3f} / {s[k.replace('unlearned', 'retrained')]:.3f} / "
                f"{s[k.replace('unlearned', 'never_updated')]:.3f}" for k in s if k.endswith("_auc_unlearned")))
        if remedy is not None:
            if attack_state is None or not rows or s["certificate_failed"]:
                server.retrain_exact()      # the attacks above leave this model in place when they run
            remedy["retrained"] = backdoor.measure(server)
            for model, m in remedy.items():
                s[f"backdoor_asr_{model}"] = m["asr"]
                s[f"backdoor_test_accuracy_{model}"] = m["test_accuracy"]
            s["backdoor_triggered_items"] = remedy["before"]["triggered_items"]
            s["backdoor_removed"] = int(sum(r["items"] for r in rows))
            s["clean_test_accuracy"] = out["setup"]["clean_test_accuracy"]
            ctx.log.info("%s: backdoor ASR before %.3f, after unlearning %.3f, retrained %.3f (clean accuracy "
                         "%.4f / %.4f / %.4f)", self.name, *(remedy[k]["asr"] for k in remedy),
                         *(remedy[k]["test_accuracy"] for k in remedy))
        if p.requests.selection == "adversarial":
            s = out["summary"]
            s["clean_test_accuracy"] = out["setup"]["clean_test_accuracy"]
            s["accuracy_recovery"] = s["final_test_accuracy"] - s["initial_test_accuracy"]
        return out

    def processor(self, server, budget: float, algo) -> RequestProcessor:
        return RequestProcessor(server, self.params, budget, retrain=server.retrain_exact,
                                influence=self.influence, algo=algo)

    @staticmethod
    def log_request(ctx, row: dict, budget: float) -> None:
        if row.get("true_norm_violation"):
            ctx.log.error("request %d: certificate violated: the true gradient norm %.3g on exact embeddings exceeds "
                          "the bound %.3g of the model it was computed for (action: %s)", row["request"],
                          row["true_norm"], row["step_bound"] if row["action"] != "newton" else row["bound"],
                          row["action"])
        if row.get("action") == "retrain":
            ctx.log.info("request %d: the step's bound %.3g > budget %.3g: exact re-propagation and retraining "
                         "(bound now %.3g)", row["request"], row["step_bound"], budget, row["bound"])
        elif row.get("action") == "newton" and not row["within_budget"]:
            ctx.log.warning("request %d: released model's bound %.3g > budget %.3g: NOT certified "
                            "(certificate.enforce=false)", row["request"], row["bound"], budget)

    def summary(self, rows: list[dict], setup: dict, proc, budget: float) -> dict:
        p = self.params
        self.C = proc.server.C

        def mean(key):
            vals = [r[key] for r in rows if r.get(key) is not None]
            return float(np.mean(vals)) if vals else 0.0

        accs = [r["test_accuracy"] for r in rows if r["test_accuracy"] is not None]
        s = {"method": self.name, "requests": len(rows), "type": p.requests.type,
             "selection": p.requests.selection, "batch_size": p.requests.batch_size,
             "initial_test_accuracy": setup["test_accuracy"],
             "final_test_accuracy": accs[-1] if accs else setup["test_accuracy"],
             "retrain_count": proc.retrains, "budget": float(budget)}
        released = [r for r in rows if r.get("released", True) and "bound" in r]
        if released:
            s["max_released_bound"] = float(max(r["bound"] for r in released))
            s["requests_outside_budget"] = int(sum(not r["within_budget"] for r in released))
            s["max_rounding_term"] = float(max(r["rounding_term"] for r in released))
            for action in ("newton", "retrain", "refused"):
                s[f"actions_{action}"] = int(sum(r["action"] == action for r in rows))
        for key in ("total_s", "propagation_s", "model_update_s", "certificate_s", "retrain_s", "exchanges"):
            s[f"mean_{key}"] = mean(key)
        if self.newton:
            s.update({f"whole_model_{k}": v for k, v in guarantee(p.certificate, self.C)["whole_model"].items()
                      if k in ("epsilon", "delta")})
        if p.report.bounds and rows:
            s["true_norm_violations"] = int(getattr(proc, "violations", 0))
            # the paper's Fig. 2 claim, request by request: true <= data-dependent <= worst-case
            s["bounds_true_le_data_dependent"] = float(np.mean([r["true_norm"] <= r["data_dependent_bound"]
                                                                for r in rows]))
            s["bounds_data_dependent_le_worst_case"] = float(np.mean(
                [r["data_dependent_bound"] <= min(r["worst_case_main"], r["worst_case_intermediate"]) for r in rows]))
            for key in ("true_norm", "data_dependent_bound", "worst_case_main"):
                s[f"final_{key}"] = float(rows[-1][key])
        return s


class RequestProcessor:
    """One deletion request after another: route items to their clients (only those update their
    propagation state and training rows), then the Newton step under the accountant. Returns the row
    ``unlearning.json`` records."""

    def __init__(self, server, params, budget: float, retrain=None, influence: bool = False, algo=None):
        self.server, self.params, self.budget = server, params, budget
        self.retrain = server.retrain_exact if retrain is None else retrain
        self.influence = influence
        self.algo = algo
        self.beta = np.zeros(server.C)
        self.worst = WorstCaseAccumulator()
        self.retrains = 0
        self.violations = 0          # report.bounds: requests whose true norm exceeded the bound
        self.report_s = 0.0
        self.failed = False

    def _step(self, delta, touched):
        """Solve H v = Delta and the step's error terms: the Newton remainder
        (gamma2 / 2) ||Z'|| ||Z'v|| min(||Z'v||, ||Z'|| ||v||) (docs/unlearning.md, Lemma 3), the solve residual,
        CEU's Hessian change, the factored solver's anchor drift. Returns them with the (solve,
        certificate) seconds."""
        server, cert = self.server, self.params.certificate
        t1 = time.perf_counter()
        sol = server.solve(delta, self.params.solver, at_old=self.influence)
        t2 = time.perf_counter()
        terms = server.certificate_terms(sol["v"], cert.residue_norm, cert.spectral_norm, touched, cert.spectral_slack)
        step = newton_remainder(terms["z_norm"], np.linalg.norm(sol["v"], axis=0), terms["zv_norm"])
        step_error = step + sol["solve_residual"]
        hess_change = drift = None
        if self.influence:
            hess_change = server.hessian_change_norm(sol["v"])
            step_error = step_error + hess_change
        if self.params.solver == "factored":
            drift = server.factored.drift(terms["z_norm"], terms["zv_norm"])
            step_error = step_error + drift
        self.last = {"unlearning_term": step, "solve_residual": sol["solve_residual"], "hessian_change": hess_change,
                     "anchor_drift": drift}
        return sol, terms, step, step_error, hess_change, drift, (t2 - t1, time.perf_counter() - t2)

    def approx_term(self, terms: dict, w: np.ndarray, rounding: bool = True) -> np.ndarray:
        """Per class, what the propagation error and the training tolerance add to the bound of the
        model ``w``. ``theorem``: c1 ||s|| + gamma1 ||Z'|| |w_c|^T s (Theorem 1; s: the column sums bounding
        the embedding error, with the rounding unless ``rounding=False``); ``paper_estimate``:
        2 c1 (||1^T R|| + the drift of the implied signed sums). Plus the training gradient norm."""
        cert = self.params.certificate
        approx = np.zeros(self.beta.shape)
        if cert.include_approx_term:
            if cert.residue_norm == "theorem":
                sums = terms["error_sums"] if rounding else terms["residue_sums"]
                approx = C1 * np.linalg.norm(sums) + GAMMA1 * terms["z_norm"] * (np.abs(w) * sums[:, None]).sum(0)
            else:
                approx = approx + 2 * C1 * (terms["residue_norm"] + (terms["rounding_norm"] if rounding else 0.0))
        if cert.include_train_residual:
            approx = approx + self.server.train_residual
        return np.broadcast_to(np.asarray(approx, dtype=np.float64), self.beta.shape)

    def rounding_term(self, terms: dict, w: np.ndarray) -> float:
        """What the arithmetic (the float32 state, the float64 propagation) adds to the bound."""
        return float((self.approx_term(terms, w) - self.approx_term(terms, w, rounding=False)).max())

    def state_terms(self) -> dict:
        """The approximation terms of the current state (no step): the residue sums and ||Z'||."""
        cert = self.params.certificate
        terms = self.server.approximation_state(cert.residue_norm)
        terms["z_norm"], _ = self.server.spectral_norm(cert.spectral_norm, [], cert.spectral_slack)
        return terms

    def initial(self) -> dict:
        """The model before any request: its bound (approximation term only). Above the budget with
        ``enforce``, it is re-propagated exactly and retrained first (and refused if that is not enough)."""
        cert = self.params.certificate
        terms = self.state_terms()
        bound = float(self.approx_term(terms, self.server.W).max())
        out = {"initial_bound": bound, "initial_residue_norm": terms["residue_norm"],
               "initial_rounding_term": self.rounding_term(terms, self.server.W), "repropagated": False}
        if not bound <= self.budget and cert.enforce:
            self.retrain()
            terms = self.state_terms()
            out.update(repropagated=True, bound_after_repropagation=float(self.approx_term(terms, self.server.W).max()))
            self.failed = not out["bound_after_repropagation"] <= self.budget
        return out

    def _true_norm(self, w: np.ndarray) -> np.ndarray:
        t0 = time.perf_counter()
        true = self.server.true_gradient_norm(w)
        self.report_s += time.perf_counter() - t0
        return true

    def process(self, req: dict, evaluate: bool = True) -> dict:
        server, p = self.server, self.params
        cert = p.certificate
        kind = p.requests.type
        server.round += 1
        self.report_s = 0.0
        ex0, t0 = server.exchanges, time.perf_counter()
        n_old = server.num_train()
        eps2 = self._embedding_change(req) if p.report.bounds else None
        for party in server.parties:
            party.change = None
        touched = [server.parties[cid] for cid in sorted(req)]

        t1 = time.perf_counter()
        for party in touched:
            party.apply(kind, req[party.cid], server.C)
        prop_s = time.perf_counter() - t1

        t1 = time.perf_counter()
        delta = server.gradient_change(touched) + server.lam * (n_old - server.num_train()) * server.W
        model_s = time.perf_counter() - t1
        sol, terms, step, step_error, hess_change, drift, times = self._step(delta, touched)
        model_s, cert_s = model_s + times[0], times[1]
        bound = self.beta + step_error + self.approx_term(terms, server.W + sol["v"])   # of W + v, before release
        exceeded = bool(np.any(~(bound <= self.budget)))        # a NaN bound is never within the budget
        if exceeded and cert.enforce and drift is not None and np.any(drift > 0):
            # the anchor's curvature drift is what does not fit: rebuild it at the current W (drift 0), re-solve
            rebuild_s = server.factored.build()
            model_s += rebuild_s
            sol, terms, step, step_error, hess_change, drift, times = self._step(delta, touched)
            sol["anchor_build_s"] += rebuild_s
            model_s, cert_s = model_s + times[0], cert_s + times[1]
            bound = self.beta + step_error + self.approx_term(terms, server.W + sol["v"])
            exceeded = bool(np.any(~(bound <= self.budget)))
        v, v_norm = sol["v"], np.linalg.norm(sol["v"], axis=0)
        approx = self.approx_term(terms, server.W + v)
        rounding = self.rounding_term(terms, server.W + v)
        # report.bounds: the true gradient norm of W + v on exact embeddings, checked against its bound
        # before release; a violation is logged and handled like a bound above the budget
        true = self._true_norm(server.W + v) if p.report.bounds else None
        violation = bool(true is not None and np.any(~(true <= bound)))
        self.violations += violation

        retrain_s, action = 0.0, "newton"
        if (exceeded or violation) and cert.enforce:
            # W + v is never released: exact re-propagation (residues reset) and training from scratch
            t1 = time.perf_counter()
            self.retrain()
            retrain_s = time.perf_counter() - t1
            self.beta[:] = 0.0
            self.worst.reset()
            self.retrains += 1
            self.after = self.state_terms()
            approx = held = self.approx_term(self.after, server.W)
            action = "retrain"
            if p.report.bounds:
                true = self._true_norm(server.W)
                if np.any(~(true <= held)):
                    self.violations += 1
                    violation = True
            if np.any(~(held <= self.budget)) or (p.report.bounds and np.any(~(true <= held))):
                action = "refused"      # even a model retrained on exact embeddings is outside its certificate
                self.failed = True
        else:
            self.beta = self.beta + step_error
            self.last_v = v
            server.W = server.W + v
            server.broadcast("weights", server.W)
            held = bound
        total_s = time.perf_counter() - t0 - self.report_s
        row = {"items": int(sum(np.shape(x)[-1] if kind == "edge" else len(x) for x in req.values())),
               "clients": [int(pt.cid) for pt in touched],
               "propagation_s": prop_s, "model_update_s": model_s, "certificate_s": cert_s,
               "retrain_s": retrain_s, "total_s": total_s,
               "z_norm": terms["z_norm"], "spectral_refresh": terms.get("spectral_refresh", 0),
               "newton_norm": float(v_norm.max()),
               "prediction_change_norm": float(terms["zv_norm"].max()),
               "unlearning_term": float(step.max()), "solve_residual": float(sol["solve_residual"].max()),
               "beta": float(self.beta.max()), "approx_term": float(approx.max()),
               "residue_norm": terms["residue_norm"], "rounding_norm": terms["rounding_norm"],
               "rounding_term": rounding, "step_bound": float(bound.max()),
               "bound": float(held.max()), "budget": float(self.budget), "action": action,
               "released": action != "refused", "within_budget": bool(np.all(held <= self.budget)),
               "budget_left": float(self.budget - held.max()), "retrained": action != "newton",
               "retrain_count": self.retrains, "cg_iterations": sol["cg_iterations"],
               "spectral_iterations": terms["spectral_iterations"],
               "exchanges": server.exchanges - ex0}
        if hess_change is not None:
            row["hessian_change_norm"] = float(hess_change.max())
        if drift is not None:
            row.update(anchor_drift=float(drift.max()), anchor_builds=server.factored.builds,
                       anchor_build_s=sol["anchor_build_s"])
        if action != "newton":      # the state the released (retrained) model was trained on
            row["residue_norm_after_retrain"] = self.after["residue_norm"]
            row["rounding_term_after_retrain"] = self.rounding_term(self.after, server.W)
        if p.report.bounds:
            t1 = time.perf_counter()
            row.update(self._report(kind, eps2, n_old, held, true, action != "newton"))
            row["true_norm_violation"] = violation
            row["report_s"] = self.report_s + time.perf_counter() - t1
        row["test_accuracy"] = server.accuracy("test") if evaluate else None
        return row

    # -- the bounds of Fig. 2 ----------------------------------------------------------------------------
    def _embedding_change(self, req: dict) -> list[float]:
        kind = self.params.requests.type
        out = []
        for cid, items in req.items():
            prop = self.server.parties[cid].prop
            out += embedding_change(kind, prop.deg, items, prop.neighbours)
        return out

    def _report(self, kind: str, eps2: list[float], n_old: int, held, true, retrained: bool) -> dict:
        server = self.server
        F = server.parties[0].x.shape[1]
        n = sum(pt.n for pt in server.parties)
        props = [pt.prop for pt in server.parties]
        eps1 = float(np.sqrt(n) * props[0].L * props[0].r_max)
        parts = worst_case(kind, eps1, eps2, F, server.lam, n_old)
        if retrained:      # the retrained model carries no unlearning component
            parts = {**parts, "main_unlearn": 0.0, "intermediate_unlearn": 0.0}
        wc = self.worst.add(parts)
        return {"data_dependent_bound": float(held.max()), "true_norm": float(true.max()),
                "true_le_data_dependent": bool(np.all(true <= held)),
                "epsilon1": eps1, **wc, **{f"worst_case_{k}": v for k, v in parts.items()}}


def guarantee(cert, num_classes: int) -> dict:
    """What a released model is certified for: each one-vs-rest class model is (epsilon, delta)-certified
    (Theorem 2.1 with its own noise b_c and its own bound); the C-class model as one object is
    (C epsilon, C delta) by basic composition (docs/unlearning.md, *The whole model's guarantee*)."""
    return {"certificate_per_class": {"epsilon": cert.epsilon, "delta": cert.delta},
            "whole_model": {"epsilon": num_classes * cert.epsilon, "delta": num_classes * cert.delta,
                            "classes": num_classes,
                            "composition": "basic composition of the C per-class (epsilon, delta) certificates"}}


def newton_remainder(z_norm: float, v_norm: np.ndarray, zv_norm: np.ndarray) -> np.ndarray:
    """||grad L(w + v) - grad L(w) - H v|| <= (gamma2 / 2) ||Z|| ||Z v|| max_i |z_i^T v| per class, and
    max_i |z_i^T v| <= min(||Z v||, ||Z|| ||v||) (docs/unlearning.md, Lemma 3). Guo et al.'s
    gamma2 ||Z|| ||v|| ||Z v|| assumes ||z_i|| <= 1, which symmetric propagation does not give."""
    return 0.5 * GAMMA2 * z_norm * zv_norm * np.minimum(zv_norm, z_norm * v_norm)


@UNLEARNING.register("scalegun", params=CertifiedUnlearningParams)
class ScaleGUN(CertifiedUnlearning):
    name = "scalegun"
