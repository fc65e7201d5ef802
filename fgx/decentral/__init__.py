"""Decentralised (peer-to-peer) learning: communication graphs, gossip matrices and the vectorised
node-model runtime used by the gossip algorithms (dsgd, dp_dsgd, muffliato, antipgd, dmf,
mafalda_sgd). See docs/decentralised.md."""
