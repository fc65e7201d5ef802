"""Re-apply the hand-made mutations of issue #25 (each one broke a method while the whole fast suite
still passed) to the current code, one at a time in a scratch copy of the repository, and run the test
that is meant to kill it. Prints one line per mutation: killed / SURVIVED / not applicable (the code
moved on: update the snippet below). Exit status 1 if any mutation survived.

    python scripts/known_mutations.py                 # all, each with its killing test(s)
    python scripts/known_mutations.py fedavg_no_update --suite   # one, with the whole fast suite

On a shared machine run it alone, under nice -n 10. docs/testing.md lists the table it prints."""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Mutation:
    name: str
    path: str
    old: str
    new: str
    tests: list[str]
    what: str


M = Mutation
MUTATIONS = [
    M("fedavg_no_update", "fgx/algorithms/fedavg.py",
      "        add_delta(self.global_model, ch.aggregate(self.up, mean, len(chosen), r))",
      "        ch.aggregate(self.up, mean, len(chosen), r)",
      ["tests/test_mechanism_fedavg.py::test_fedavg_new_global_is_the_train_weighted_average_of_received_updates"],
      "FedAvg: the global model is never updated"),
    M("fedavg_unweighted", "fgx/algorithms/fedavg.py",
      "weighted_average(deltas, aggregation_weights(chosen, p.weighting))",
      "weighted_average(deltas, [1.0] * len(chosen))",
      ["tests/test_mechanism_fedavg.py::test_fedavg_new_global_is_the_train_weighted_average_of_received_updates"],
      "FedAvg: train-item weighting ignored"),
    M("ce_eq5_no_moving_average", "fgx/algorithms/ce_fedgnn.py",
      "new = torch.where(m, (1 - gamma) * old + gamma * fresh.detach(), old)",
      "new = torch.where(m, fresh.detach(), old)",
      ["tests/test_mechanism_ce_fedgnn.py::test_eq5_shared_embedding_is_the_moving_average_of_fresh_values"],
      "CE-FedGNN Eq. 5: new value = fresh (no moving average)"),
    M("ce_eq9_raw_gradient", "fgx/algorithms/ce_fedgnn.py",
      "c.G[name] = (1 - p.beta) * c.G[name] + p.beta * grad.detach()",
      "c.G[name] = grad.detach()",
      ["tests/test_mechanism_ce_fedgnn.py::test_eq9_uploaded_estimator_is_the_moving_average_of_gradients"],
      "CE-FedGNN Eq. 9: G = raw gradient"),
    M("dp_fedavg_no_clip", "fgx/privacy/dp_fedavg.py",
      "return clip_by_global_norm(payload, self.params.clip)",
      "return payload",
      ["tests/test_mechanism_fedavg.py::test_dp_fedavg_releases_are_clipped_and_the_average_carries_noise_of_the_configured_std"],
      "DP-FedAvg: no clipping"),
    M("gossip_no_noise", "fgx/privacy/mf_gdp.py",
      "return payload - (self.lr * noise).to(device=payload.device, dtype=payload.dtype)",
      "return payload - 0 * (self.lr * noise).to(device=payload.device, dtype=payload.dtype)",
      ["tests/test_mechanism_gossip.py::test_dp_dsgd_noise_has_the_std_its_mu_requires"],
      "gossip: noise x 0 (epsilon still reported)"),
    M("gossip_no_averaging", "fgx/algorithms/gossip.py",
      "mixed = self.w @ sent",
      "mixed = sent",
      ["tests/test_mechanism_gossip.py::test_gossip_step_mixes_the_sent_half_steps_with_w"],
      "gossip: no gossip averaging"),
    M("fedmf_sum_not_mean", "fgx/algorithms/fedmf.py",
      "total[held] / count[held, None]",
      "total[held]",
      ["tests/test_mechanism_recsys.py::test_fedmf_server_adds_the_mean_update_of_the_clients_holding_each_item"],
      "FedMF: sum of item updates instead of their mean"),
    M("fedmf_server_frozen", "fgx/algorithms/fedmf.py",
      "        self.items[held] += p.server_lr * total[held] / count[held, None]\n",
      "",
      ["tests/test_mechanism_recsys.py::test_fedmf_server_adds_the_mean_update_of_the_clients_holding_each_item"],
      "FedMF: the server never updates its item table"),
    M("fedpub_own_theta", "fgx/algorithms/fedpub.py",
      "self.personal = [personalised_average(thetas, W[i], i) for i in range(len(thetas))]",
      "self.personal = [dict(thetas[i]) for i in range(len(thetas))]",
      ["tests/test_mechanism_personalised.py::test_fedpub_sends_each_client_the_similarity_weighted_average"],
      "FED-PUB: the personalised model is the client's own weights"),
    M("fedgsp_t_sign", "fgx/algorithms/fedgsp.py",
      "t = params.alpha * sim_q - params.beta * sim_p",
      "t = params.beta * sim_p - params.alpha * sim_q",
      ["tests/test_mechanism_personalised.py::test_fedgsp_graph_gives_more_weight_to_more_similar_clients"],
      "FedGSP: sign of t flipped"),
    M("label_dirichlet_uniform", "fgx/partition/label_dirichlet.py",
      "props = rng.dirichlet(np.full(p.num_clients, p.alpha))",
      "props = np.full(p.num_clients, 1.0 / p.num_clients)",
      ["tests/test_mechanism_partition.py::test_label_dirichlet_skews_labels_as_alpha_says"],
      "label_dirichlet: uniform proportions"),
    M("louvain_singletons", "fgx/partition/louvain.py",
      "communities = [sorted(c) for c in nx.community.louvain_communities(g, resolution=p.resolution, seed=seed)]",
      "communities = [[v] for v in range(data.num_nodes)]",
      ["tests/test_mechanism_partition.py::test_community_partitioners_cut_far_fewer_edges_than_random"],
      "louvain: singleton communities"),
    M("metis_round_robin", "fgx/partition/metis.py",
      "membership = torch.from_numpy(metis_parts(data.edge_index, data.num_nodes, p.num_clients, seed))",
      "membership = torch.arange(data.num_nodes) % p.num_clients",
      ["tests/test_mechanism_partition.py::test_community_partitioners_cut_far_fewer_edges_than_random"],
      "metis: round-robin assignment"),
    M("metric_dp_min_releases", "fgx/privacy/metric_dp.py",
      "return max(self.releases.values()) if self.releases else 0",
      "return min(self.releases.values()) if self.releases else 0",
      ["tests/test_mechanism_ce_fedgnn.py::test_metric_dp_accounts_the_largest_per_node_release_count"],
      "metric-DP: min instead of max release count"),
    M("metric_dp_no_model_clip", "fgx/privacy/metric_dp.py",
      "            return clip_by_global_norm(payload, p.clip_model)",
      "            return payload",
      ["tests/test_mechanism_ce_fedgnn.py::test_metric_dp_clips_w_and_g_and_noises_their_averages"],
      "metric-DP: model clipping removed"),
    M("metric_dp_no_g_clip", "fgx/privacy/metric_dp.py",
      "            return clip_by_global_norm(payload, p.clip_grad_estimator)",
      "            return payload",
      ["tests/test_mechanism_ce_fedgnn.py::test_metric_dp_clips_w_and_g_and_noises_their_averages"],
      "metric-DP: gradient-estimator clipping removed"),
    M("metric_dp_no_sigma12", "fgx/privacy/metric_dp.py",
      'std = {"update": self.params.sigma1, "grad_estimator": self.params.sigma2}.get(kind, 0.0)',
      "std = 0.0",
      ["tests/test_mechanism_ce_fedgnn.py::test_metric_dp_clips_w_and_g_and_noises_their_averages"],
      "metric-DP: sigma1/sigma2 removed"),
    M("trust_secldp_as_ldp", "fgx/privacy/mf/trust.py",
      'if trust == "ldp":\n        b = wt @ mix',
      'if trust in ("ldp", "secldp"):\n        b = wt @ mix',
      ["tests/test_mafalda.py::test_secldp_secrets_reduce_loss_against_ldp"],
      "trust models: SecLDP treated as LDP"),
    M("pndp_attacker_noise_unknown", "fgx/privacy/mf/trust.py",
      "    mixed[:, att, :] = 0.0\n",
      "",
      ["tests/test_mafalda.py::test_victim_grams_equal_the_dense_projector"],
      "PNDP accountant: the attacker's own noise counted as hiding the victim"),
    M("mf_gdp_sigma_without_sens", "fgx/privacy/mf_gdp.py",
      "sigma = float(np.sqrt(sens2) / p.mu)",
      "sigma = float(1.0 / p.mu)",
      ["tests/test_mafalda.py::test_released_noise_has_the_calibrated_correlated_covariance"],
      "mf_gdp: noise not scaled by the correlation's sensitivity"),
    M("lpsfed_rho_bar_one", "fgx/algorithms/lpsfed.py",
      "new = personalized_mix(own, mean, float(rb))",
      "new = personalized_mix(own, mean, 1.0)",
      ["tests/test_mechanism_recsys.py::test_lpsfed_sends_eq14_mix_with_eq12_rho_bar"],
      "LPSFed: rho_bar forced to 1 (no personalisation)"),
    M("spectral_highest", "fgx/recsys/spectral.py",
      "return np.clip(w[:k], 0.0, 2.0), v[:, :k]",
      "return np.clip(w[-k:], 0.0, 2.0), v[:, -k:]",
      ["tests/test_mechanism_recsys.py::test_lowest_eigenpairs_are_the_lowest"],
      "LPSFed spectrum: highest eigenpairs instead of lowest"),
    M("spectral_softmax", "fgx/recsys/spectral.py",
      "k = lam / s if s > 0 else np.full(len(lam), 1.0 / len(lam))",
      "k = np.exp(lam) / np.exp(lam).sum()",
      ["tests/test_mechanism_recsys.py::test_lowpass_distribution_is_eigenvalue_share"],
      "LPSFed Eq. 16: softmax instead of lambda / sum lambda"),
    # issue #38: mechanisms of the FedGSP / LPSFed baselines that no test guarded
    M("adafgl_uniform_soft_labels", "fgx/algorithms/adafgl.py",
      "        soft = torch.softmax(state.model(view), 1)\n",
      "        soft = torch.full_like(torch.softmax(state.model(view), 1), 1.0 / c)\n",
      ["tests/test_fedgsp_baselines.py::test_adafgl_step_two_uses_the_extractors_soft_labels_and_the_knowledge_graph"],
      "AdaFGL: extractor soft labels replaced by uniform"),
    M("adafgl_plain_adjacency", "fgx/algorithms/adafgl.py",
      "smoothed = torch.cat(propagate(mixed, view.x.float(), p.prop_steps), 1)",
      "smoothed = torch.cat(propagate(adj, view.x.float(), p.prop_steps), 1)",
      ["tests/test_fedgsp_baselines.py::test_adafgl_step_two_uses_the_extractors_soft_labels_and_the_knowledge_graph"],
      "AdaFGL: smoothing over the plain, not the knowledge-guided adjacency"),
    M("fedtad_uniform_reliability", "fgx/algorithms/fedtad.py",
      "ckr = normalise_over_clients(self.ckr)[cids].to(dev)",
      "ckr = torch.full_like(normalise_over_clients(self.ckr)[cids], 1.0 / len(cids)).to(dev)",
      ["tests/test_fedgsp_baselines.py::test_fedtad_distillation_weights_by_the_received_reliability"],
      "FedTAD: class-wise reliability uniform in the distillation"),
    M("fedtad_no_topology_score", "fgx/algorithms/fedtad.py",
      "h = torch.cat([view.x.float(), rw], 1)",
      "h = view.x.float()",
      ["tests/test_fedgsp_baselines.py::test_fedtad_reliability_counts_the_topology_score"],
      "FedTAD: reliability from features only (no topology score)"),
    M("fedgta_no_label_propagation", "fgx/algorithms/fedgta.py",
      "out = label_propagation(adj, y0, train, p.lp_steps, p.lp_alpha)",
      "out = y0",
      ["tests/test_fedgsp_baselines.py::test_fedgta_descriptor_reads_the_topology_through_label_propagation"],
      "FedGTA: label propagation replaced by identity"),
    M("fedrap_logits_without_d", "fgx/algorithms/fedrap.py",
      "v = self.item_personal(items) + self.item_emb(items)",
      "v = self.item_emb(items)",
      ["tests/test_recsys_fedrec_baselines.py::test_fedrap_shares_commonality_keeps_personality"],
      "FedRAP: training logits without the personality D"),
    M("fediih_no_vgae", "fgx/algorithms/fediih.py",
      "loss = loss + p.vgae_weight * negative_elbo(mu, heads(mu), view.edge_index, prior, g)",
      "loss = loss",
      ["tests/test_fedgsp_baselines.py::test_fediih_variance_heads_learn_only_through_the_vgae_term"],
      "FedIIH: no VGAE term in the local loss"),
    M("fediih_js_mean_over_dims", "fgx/algorithms/fediih.py",
      "js.sum(-1) / math.log(2.0)",
      "js.mean(-1) / math.log(2.0)",
      ["tests/test_fedgsp_baselines.py::test_fediih_js_similarity_and_factor_weights"],
      "FedIIH: JS averaged over dimensions (weights ~uniform)"),
    M("gcfl_clusters_average_everyone", "fgx/algorithms/gcfl.py",
      "groups = [(k, a), (len(self.clusters) - 1, b)]",
      "groups = [(k, list(range(len(members)))), (len(self.clusters) - 1, list(range(len(members))))]",
      ["tests/test_baselines.py::test_gcfl_averages_updates_inside_each_cluster_only"],
      "GCFL: each cluster averages every member's update after a split"),
    M("louvain_seed_zero", "fgx/partition/louvain.py",
      "louvain_communities(g, resolution=p.resolution, seed=seed)",
      "louvain_communities(g, resolution=p.resolution, seed=0)",
      ["tests/test_mechanism_partition.py::test_seeded_partitioners_depend_on_their_seed"],
      "louvain: seed fixed to 0"),
    M("fedpergnn_noise_without_sqrt_batch", "fgx/algorithms/fedpergnn.py",
      "return 2 * self.p.clip / (math.sqrt(batch_len) * self.p.ldp_epsilon)",
      "return 2 * self.p.clip / self.p.ldp_epsilon",
      ["tests/test_recsys_fedrec_baselines.py::test_fedpergnn_ldp_noises_every_batch_gradient_at_the_authors_scale"],
      "FedPerGNN: Laplace scale 2·clip/ε (no 1/√B)"),
    M("fedpergnn_no_noise", "fgx/algorithms/fedpergnn.py",
      "            prm.grad.add_(noise)\n",
      "",
      ["tests/test_recsys_fedrec_baselines.py::test_fedpergnn_ldp_noises_every_batch_gradient_at_the_authors_scale"],
      "FedPerGNN: noise drawn and counted but not added"),
    # issue 43: the standard FL methods (tests/test_fl_methods.py)
    M('scaffold_no_correction', "fgx/algorithms/scaffold.py",
      '            w.grad.add_(corr[name])',
      '            pass',
      ["tests/test_fl_methods.py::test_scaffold_steps_on_the_corrected_gradient_and_keeps_option_ii_control_variates"],
      'SCAFFOLD: local steps without g + c - c_i'),
    M('scaffold_ci_without_c', "fgx/algorithms/scaffold.py",
      'ci_new = {k: ci[k] - c[k] - delta[k]',
      'ci_new = {k: ci[k] - delta[k]',
      ["tests/test_fl_methods.py::test_scaffold_steps_on_the_corrected_gradient_and_keeps_option_ii_control_variates"],
      "SCAFFOLD: option II's c_i+ without -c"),
    M('moon_no_contrastive', "fgx/algorithms/moon.py",
      '    return mu * nn.functional.cross_entropy(sims',
      '    return 0 * mu * nn.functional.cross_entropy(sims',
      ["tests/test_fl_methods.py::test_moon_adds_the_model_contrastive_loss_with_global_and_previous_representations"],
      'MOON: contrastive term zeroed'),
    M('moon_prev_never_updated', "fgx/algorithms/moon.py",
      '    state.extra["prev_weights"] = flat_params(state.model)\n',
      '',
      ["tests/test_fl_methods.py::test_moon_adds_the_model_contrastive_loss_with_global_and_previous_representations"],
      'MOON: previous model stays the initial one'),
    M('fedproto_no_proto_term', "fgx/algorithms/fedproto.py",
      '    return state.extra["lamda"] * nn.functional.mse_loss(z, target)',
      '    return 0 * nn.functional.mse_loss(z, target)',
      ["tests/test_fl_methods.py::test_fedproto_uploads_class_means_and_averages_them_per_class"],
      'FedProto: no lambda*MSE to global prototypes'),
    M('fedproto_mean_over_all_clients', "fgx/algorithms/fedproto.py",
      '/ count.clamp(min=1).unsqueeze(1)',
      '/ len(uploads)',
      ["tests/test_fl_methods.py::test_fedproto_uploads_class_means_and_averages_them_per_class"],
      'FedProto: class mean over all clients, holders or not'),
    M('fedtgp_no_margin', "fgx/algorithms/fedtgp.py",
      'dist = torch.cdist(x, P) + margin *',
      'dist = torch.cdist(x, P) + 0 *',
      ["tests/test_fl_methods.py::test_fedtgp_trains_global_prototypes_with_the_adaptive_margin"],
      'FedTGP: server loss without the margin'),
    M('feddc_no_drift_in_average', "fgx/algorithms/feddc.py",
      '(sd[k] + mean[k] + drift.get(k, 0.0))',
      '(sd[k] + mean[k])',
      ["tests/test_fl_methods.py::test_feddc_corrects_the_average_by_the_drift_and_steps_on_the_drift_objective"],
      'FedDC: server average without the mean drift'),
    M('feddc_no_penalty', "fgx/algorithms/feddc.py",
      'return 0.5 * x["alpha"] * pen + cor',
      'return cor',
      ["tests/test_fl_methods.py::test_feddc_corrects_the_average_by_the_drift_and_steps_on_the_drift_objective"],
      'FedDC: local objective without the drift penalty'),
    M('feddc_gi_without_g', "fgx/algorithms/feddc.py",
      'gi[n] = gi[n] - g[n] / wi - delta[n] / (steps * p.lr)',
      'gi[n] = gi[n] - delta[n] / (steps * p.lr)',
      ["tests/test_fl_methods.py::test_feddc_corrects_the_average_by_the_drift_and_steps_on_the_drift_objective"],
      "FedDC: g_i's update without -g/w_i"),
    M('fedtad_diversity_times_d', 'fgx/algorithms/fedtad.py',
      'noise_d = torch.cdist(noise, noise).pow(2) / noise.size(1)',
      'noise_d = torch.cdist(noise, noise).pow(2) * noise.size(1)',
      ['tests/test_formula_values.py::test_fedtad_diversity_loss_is_the_authors_pairwise_mean_distances'],
      "FedTAD: diversity loss's noise distance x d instead of mean"),
    M('fedgta_uniform_over_all', 'fgx/algorithms/fedgta.py',
      'uniform = accept.double() / accept.sum(1, keepdim=True)',
      'uniform = accept.double() / accept.sum(None, keepdim=True)',
      ['tests/test_formula_values.py::test_fedgta_weights_fall_back_to_uniform_over_each_clients_own_accepted_set'],
      'FedGTA: zero-confidence fallback normalised over all clients'),
    M('fedhgnn_attention_over_nodes', 'fgx/algorithms/fedhgnn.py',
      'beta = torch.softmax(self.project(z).mean(0), dim=0)',
      'beta = torch.softmax(self.project(z).mean(1), dim=0)',
      ['tests/test_formula_values.py::test_fedhgnn_semantic_attention_weighs_meta_paths_by_their_node_averaged_score'],
      'FedHGNN: semantic attention averaged over paths, not nodes'),
    M('fediih_elbo_global_rng', 'fgx/algorithms/fediih.py',
      'negative_elbo(mu, heads(mu), view.edge_index, prior, g)',
      'negative_elbo(mu, heads(mu), view.edge_index, prior, None)',
      ['tests/test_behaviour_unchanged.py::test_two_rounds_give_the_recorded_metrics[fediih]'],
      "FedIIH: VGAE term drawn from torch's global stream"),
    M('fediih_prior_sign', 'fgx/algorithms/fediih.py',
      'c_mean = (mu.sum(0) + prior) / (n + 1)',
      'c_mean = (mu.sum(0) - prior) / (n + 1)',
      ['tests/test_formula_values.py::test_fediih_elbo_kl_terms_use_the_conjugate_client_posterior'],
      "FedIIH: q(c)'s mean with the prior subtracted"),
    M('fedproto_share_in_round_1', 'fgx/algorithms/fedproto.py',
      'if gp is not None and loss == loss:',
      'if gp is not None or loss == loss:',
      ['tests/test_formula_values.py::test_fedproto_reports_a_regulariser_share_only_from_the_round_that_has_global_prototypes'],
      'FedProto: regulariser share before any global prototype'),
    M('fedsage_record_key', 'fgx/algorithms/fedsage_plus.py',
      'ctx.record("fedsage_mended", {"generated_nodes": added})',
      'ctx.record("fedsage_mended", {"generated": added})',
      ['tests/test_formula_values.py::test_fedsage_plus_records_the_generated_neighbours_per_client'],
      'FedSage+: generated-neighbour record under another key'),
    M('f2mf_last_client_stats', 'fgx/algorithms/f2mf.py',
      'total += cl.sent.double()',
      'total = cl.sent.double()',
      ['tests/test_formula_values.py::test_f2mf_global_group_statistics_are_the_sum_of_every_clients'],
      "F2MF: server keeps the last client's group sums"),
    M('gossip_train_cubed', 'fgx/algorithms/gossip.py',
      '- self.y[u].reshape(-1)).pow(2).mean())',
      '- self.y[u].reshape(-1)).pow(3).mean())',
      ['tests/test_formula_values.py::test_gossip_train_metric_is_the_mean_squared_error_over_the_nodes_rows'],
      'gossip: train metric is not the MSE'),
    M('sampled_loss_drops_extra', 'fgx/algorithms/base.py',
      '        loss = loss + extra_loss(state)\n    return loss\n\n\ndef train_steps',
      '    return loss\n\n\ndef train_steps',
      ['tests/test_formula_values.py::test_fedprox_proximal_term_acts_in_sampled_minibatch_training'],
      "sampled training ignores the extra loss (FedProx's term)"),
    M('swift_cross_full_batch', 'fgx/algorithms/swift_fedgnn.py',
      'batch = torch.randperm(n, generator=g)[:p.batch_size].to(dev)',
      'batch = None',
      ['tests/test_formula_values.py::test_swift_cross_step_uses_a_minibatch_of_the_training_nodes'],
      'Swift: cross step on every training node'),
    M('swift_feature_sums_elsewhere', 'fgx/algorithms/swift_fedgnn.py',
      'raw = ch.send("partial_feature_sums", raw, src=j, dst="server", round=r)',
      'raw = ch.send("partial_feature_sums", raw, src=j, dst=0, round=r)',
      ['tests/test_formula_values.py::test_swift_partial_feature_sums_go_to_the_server'],
      'Swift: partial feature sums sent to a client'),
    M('adafgl_resume_no_personal_model', 'fgx/algorithms/adafgl.py',
      's.extra["adafgl"]["model"].load_state_dict(m)',
      'pass',
      ['tests/test_resume_every_algorithm.py::test_adafgl_resumed_inside_its_personalised_step_gives_the_uninterrupted_numbers'],
      'AdaFGL: resume drops the personalised models'),
    M('fedtad_checkpoint_no_generator', 'fgx/algorithms/fedtad.py',
      '"generator": self.generator.state_dict(),',
      '"generator_": self.generator.state_dict(),',
      ['tests/test_resume_every_algorithm.py::test_a_run_resumed_after_round_1_gives_the_uninterrupted_numbers[fedtad]'],
      'FedTAD: checkpoint without the generator'),
    M('fedtgp_no_relu', 'fgx/algorithms/fedtgp.py',
      'self.middle = nn.Sequential(nn.Linear(dim, dim), nn.ReLU())',
      'self.middle = nn.Sequential(nn.Linear(dim, dim))',
      ['tests/test_formula_values.py::test_fedtgp_prototype_generator_has_the_authors_relu_between_its_layers'],
      'FedTGP: prototype generator without its ReLU'),
    M('fedgnn_uncapped_expansion', 'fgx/algorithms/fedgnn.py',
      'matched = match([t for _, t in ups], p.max_expanded)',
      'matched = match([t for _, t in ups], None)',
      ['tests/test_formula_values.py::test_fedgnn_max_expanded_caps_the_remote_neighbours_each_node_receives'],
      'FedGNN: max_expanded ignored'),
    M('fedmf_default_temperature', 'fgx/algorithms/fedmf.py',
      'p.batch_size, p.num_negatives, p.l2, g, bpr_tau=p.bpr_tau)',
      'p.batch_size, p.num_negatives, p.l2, g)',
      ['tests/test_formula_values.py::test_every_bpr_method_trains_at_its_configured_temperature'],
      'FedMF: BPR at temperature 1 whatever bpr_tau says'),
    M('fedpergnn_62_bit_tokens', 'fgx/algorithms/fedpergnn.py',
      '>> 1 for i in items_global.tolist()]',
      '>> 2 for i in items_global.tolist()]',
      ['tests/test_formula_values.py::test_fedpergnn_item_tokens_are_keyed_63_bit_blake2b_digests'],
      'FedPerGNN: 62-bit item tokens'),
    M('fedsage_negative_counts', 'fgx/algorithms/fedsage_plus.py',
      'return k.clamp(0, num_pred).long()',
      'return k.clamp(None, num_pred).long()',
      ['tests/test_formula_values.py::test_fedsage_plus_generated_neighbour_counts_are_clamped_to_zero_and_num_pred'],
      'FedSage+: negative generated-neighbour counts'),
    M('ce_fedgnn_subset_global_rng', 'fgx/algorithms/ce_fedgnn.py',
      'pick = torch.randperm(owners.numel(), generator=g)[:max_nodes]',
      'pick = torch.randperm(owners.numel())[:max_nodes]',
      ['tests/test_formula_values.py::test_ce_fedgnn_node_embeddings_of_a_random_subset_are_rows_of_all_of_them'],
      "CE-FedGNN: released-embedding subset not fixed by its seed"),
    M('gcfl_refusal_text', 'fgx/algorithms/gcfl.py',
      '"1.0 for gcfl: clusters are split on every client\'s update"',
      '"1.0"',
      ['tests/test_refusals.py'],
      'GCFL: client_fraction refusal without its reason'),
]


def copy_repo(dst: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, check=True,
                           capture_output=True, text=True).stdout.split("\n")
    for f in filter(None, files):
        src = REPO / f
        if src.is_file():
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / f)


def run_one(m: Mutation, suite: bool) -> str:
    text = (REPO / m.path).read_text()
    if text.count(m.old) != 1:
        return f"not applicable ({m.path} no longer has the snippet once)"
    with tempfile.TemporaryDirectory(prefix="fgx-mut-") as tmp:
        root = Path(tmp)
        copy_repo(root)
        (root / m.path).write_text(text.replace(m.old, m.new))
        args = [] if suite else m.tests
        env = {**os.environ, "PYTHONPATH": str(root), "FGX_SHARED_DATA": str(REPO.parent / "shared" / "data")}
        proc = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *args],
                              cwd=root, env=env, capture_output=True, text=True)
    if proc.returncode == 1:
        failed = [l.split(" ", 1)[1].split(" - ")[0] for l in proc.stdout.splitlines() if l.startswith("FAILED ")]
        return "killed by " + ", ".join(failed or ["?"])
    if proc.returncode == 0:
        return "SURVIVED"
    return f"error (pytest exit {proc.returncode}): {proc.stdout[-400:]}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help="mutations to run (default: all)")
    ap.add_argument("--suite", action="store_true", help="run the whole fast suite instead of the named tests")
    a = ap.parse_args()
    chosen = [m for m in MUTATIONS if not a.names or m.name in a.names]
    survived = 0
    for m in chosen:
        res = run_one(m, a.suite)
        survived += res == "SURVIVED"
        print(f"{m.name:28s} {m.what:55s} {res}", flush=True)
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
