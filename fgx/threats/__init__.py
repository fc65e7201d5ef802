"""Attacks a run can be put under (the ``threat`` config group, docs/threats.md): which clients are
malicious, what they do to their data before training and to their updates before these go up."""
