"""Distributed graph backdoor (``threat=graph_backdoor_dba``; Xu et al. 2022's DBA): the global trigger's edges
are dealt into one local trigger per malicious client, each putting only its own into its poisoned training
graphs; the attack is tested with the whole global trigger (fgx/threats/backdoor.py)."""
from __future__ import annotations

from fgx.registry import THREATS
from fgx.threats.backdoor import BackdoorParams, GraphBackdoor


@THREATS.register("graph_backdoor_dba", params=BackdoorParams)
class GraphBackdoorDBA(GraphBackdoor):
    name = "graph_backdoor_dba"
    distributed = True
