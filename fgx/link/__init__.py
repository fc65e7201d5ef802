"""Task ``link``: federated link prediction on a client's own subgraph (docs/link_prediction.md).

- ``params``: the ``task`` config key (conf/task/link.yaml), validated with the top-level config;
- ``checks``: the config-time checks of a run with ``task=link``;
- ``split``: the global graph as undirected pairs with their split, and each client's link-task graph
  (message passing on training positives only, labelled pairs with sampled negatives);
- ``model``: encoder (a node GNN's layers) + decoder (dot product or MLP) scoring node pairs;
- ``metrics`` / ``evaluate``: AUC, Hits@K and MRR (OGB's definitions) per client, pooled, and their
  sampling error."""
