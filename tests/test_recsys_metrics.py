"""Ranking metrics against a hand-computed example, and the training-item mask."""
import math

import torch

from fgx.recsys.metrics import popularity_groups, ranking_metrics, recall_ndcg, topk_with_mask


def test_recall_ndcg_hand_computed():
    # user 0 ranks items [3, 1, 0, 2, 4]; relevant {1, 4}. K = 2: hits at rank 2 only.
    # recall = 1/2; DCG = 1/log2(3); IDCG = 1 + 1/log2(3)
    # user 1 ranks [0, 2, ...]; relevant {0}: recall 1, ndcg 1.
    scores = torch.tensor([[0.5, 0.8, 0.2, 0.9, 0.1],
                           [0.9, 0.1, 0.8, 0.3, 0.2]])
    truth = torch.tensor([[0, 0, 1], [1, 4, 0]])
    empty = torch.zeros(2, 0, dtype=torch.long)
    m = ranking_metrics(scores, empty, truth, k=2)
    ndcg0 = (1 / math.log2(3)) / (1 + 1 / math.log2(3))
    assert abs(m["recall@2"] - (0.5 + 1.0) / 2) < 1e-6
    assert abs(m["ndcg@2"] - (ndcg0 + 1.0) / 2) < 1e-6
    assert m["num_users"] == 2


def test_training_items_never_in_topk_and_mask_changes_result():
    scores = torch.tensor([[0.9, 0.8, 0.7, 0.1]])
    train = torch.tensor([[0, 0], [0, 1]])      # items 0 and 1 are training items
    top = topk_with_mask(scores, train, 2)
    assert set(top[0].tolist()) == {2, 3}
    truth = torch.tensor([[0], [2]])
    assert ranking_metrics(scores, train, truth, k=1)["ndcg@1"] == 1.0
    assert ranking_metrics(scores, torch.zeros(2, 0, dtype=torch.long), truth, k=1)["ndcg@1"] == 0.0


def test_users_without_heldout_items_are_skipped():
    scores = torch.rand(3, 6)
    truth = torch.tensor([[1], [2]])
    users, rec, nd = recall_ndcg(torch.topk(scores, 3).indices, truth, 3)
    assert users.tolist() == [1]


def test_group_ndcg_and_popularity_groups():
    grp = popularity_groups(torch.tensor([0, 0, 0, 1, 1, 2, 3, 4, 5, 6]), 10)
    assert grp[0] == 2 and grp[1] == 2 and (grp == 0).sum() == 5 and (grp == 2).sum() == 2
    scores = torch.tensor([[0.9, 0.1, 0.8, 0.0]])
    item_group = torch.tensor([2, 1, 0, 0])
    truth = torch.tensor([[0, 0], [0, 2]])
    m = ranking_metrics(scores, torch.zeros(2, 0, dtype=torch.long), truth, k=2, item_group=item_group)
    assert m["ndcg@2_head"] == 1.0                      # item 0 ranked first
    assert abs(m["ndcg@2_tail"] - 1 / math.log2(3)) < 1e-6   # item 2 at rank 2, one relevant
    assert math.isnan(m["ndcg@2_mid"])


def test_full_ranking_of_ml100k_size_masks_training_items_and_matches_topk():
    """At ML-100K size (the speed target, < 2 s, is measured by scripts/bench_fast_paths.py): every
    user's top-20 excludes its training items and equals torch.topk over the masked scores."""
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(943, 1682, generator=g)
    train = torch.stack([torch.randint(943, (80000,), generator=g), torch.randint(1682, (80000,), generator=g)])
    truth = torch.stack([torch.arange(943), scores.masked_fill(
        torch.zeros_like(scores, dtype=torch.bool).index_put_((train[0], train[1]), torch.tensor(True)),
        float("-inf")).argmax(1)])                 # each user's best non-training item is its one test item
    groups = popularity_groups(train[1], 1682)
    m = ranking_metrics(scores, train, truth, 20, groups)
    assert m["recall@20"] == 1.0 and m["ndcg@20"] == 1.0
