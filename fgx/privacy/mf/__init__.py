"""Matrix-factorisation DP accounting for decentralised learning (Bellet, Cyffers, Frey, Gaudel,
Lerévérend, Taïani 2025, "Unified Privacy Guarantees for Decentralized Learning via Matrix
Factorization"): workloads, participation schemes, sensitivity through the attacker's projector
for a trust model, the closed-form Lemma-10 Gram H, the constrained factorisation solver, μ-GDP
conversions and pairwise (PNDP) privacy tables. Plain numpy/scipy (the libraries in the field have
no decentralised workloads or trust models); μ → ε comes from Opacus."""
