"""``unlearning=ceu``: Certified Edge Unlearning (Wu et al., KDD 2023) for the linear model on
propagated features, as in the authors' code (``kunwu522/certified_edge_unlearning``, SGC branch):
exact re-propagation after every request, and an influence-function step
w+ = w + H_D(w)^-1 (grad L(w, D) - grad L(w, D')) whose Hessian is the one of the data *before* the
removal (only the training nodes the removed edges reach contribute to the gradient difference; the
clients compute it from the rows that changed). Edge requests only.

Certificate: the step leaves ||grad L(w+, D')|| <= gamma2 ||Z'|| ||v|| ||Z' v|| + ||(H_D' - H_D) v|| (+ the
solve residual), the second term because the step used H_D instead of H_D'; it is computed exactly
from the changed rows and accumulated by the same accountant as ScaleGUN's."""
from __future__ import annotations

from fgx.config import ConfigError
from fgx.registry import UNLEARNING
from fgx.unlearning.scalegun import CertifiedUnlearning, CertifiedUnlearningParams


@UNLEARNING.register("ceu", params=CertifiedUnlearningParams)
class CEU(CertifiedUnlearning):
    name = "ceu"
    exact = True
    influence = True

    @classmethod
    def check_config(cls, params, validated) -> None:
        super().check_config(params, validated)
        if params.requests.type != "edge":
            raise ConfigError("unlearning.requests.type", params.requests.type, "edge (CEU unlearns edges only)")
        if params.solver == "factored":
            raise ConfigError("unlearning.solver", params.solver, "cg or hessian (CEU steps with the Hessian before "
                              "the removal, which the factored anchor does not hold)")
