"""Federated recommendation pieces: bipartite interaction data, per-user splits, ranking metrics,
spectral utilities (normalised bipartite Laplacian, low-pass eigenpairs, spectral KL) and losses."""
