"""Centralised graph backdoor (``threat=graph_backdoor_cba``; Xu et al. 2022's CBA): every malicious client puts
the whole global trigger into its poisoned training graphs (fgx/threats/backdoor.py)."""
from __future__ import annotations

from fgx.registry import THREATS
from fgx.threats.backdoor import BackdoorParams, GraphBackdoor


@THREATS.register("graph_backdoor_cba", params=BackdoorParams)
class GraphBackdoorCBA(GraphBackdoor):
    name = "graph_backdoor_cba"
    distributed = False
