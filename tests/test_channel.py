import pytest
import torch

from fgx.federation.channel import Channel, ChannelError, Message, payload_bytes


def test_bytes_counted_per_kind_and_round():
    ch = Channel({"w": Message("up"), "g": Message("down")})
    w = {"a": torch.zeros(10, 3), "b": torch.zeros(5, dtype=torch.float64)}
    ch.send("w", w, src=0, dst="server", round=1)
    ch.send("w", w, src=1, dst="server", round=1)
    ch.broadcast("g", torch.zeros(7), dsts=[0, 1, 2], round=2)
    assert payload_bytes(w) == 10 * 3 * 4 + 5 * 8
    assert ch.round_bytes(1) == {"w": 2 * 160}
    assert ch.round_bytes(2) == {"g": 3 * 28}
    rep = ch.report()
    assert rep["total_bytes"] == 320 + 84 and rep["messages"] == {"w": 2, "g": 3}


def test_undeclared_and_raw_kinds_are_refused():
    ch = Channel({"w": Message()})
    with pytest.raises(ChannelError, match="not declared"):
        ch.send("embeddings", torch.zeros(1), 0, "server", 1)
    with pytest.raises(ChannelError, match="reason"):
        Channel({"raw_features": Message()})
    ch = Channel({"raw_features": Message(raw=True, reason="FedGCN-style exchange")}, features_public=False)
    with pytest.raises(ChannelError, match="raw node features"):
        ch.send("raw_features", torch.zeros(1), 0, 1, 1)
    ch = Channel({"raw_features": Message(raw=True, reason="x")}, features_public=True)
    ch.send("raw_features", torch.zeros(1), 0, 1, 1)


def test_raw_data_is_refused_by_default_whether_marked_by_kind_or_by_flag():
    # a channel built without features_public refuses raw data (the default is the safe one)
    ch = Channel({"halo_x": Message(raw=True, reason="declared raw under its own name")})
    with pytest.raises(ChannelError, match="raw node features"):
        ch.send("halo_x", torch.zeros(1), 0, 1, 1)
    with pytest.raises(ChannelError, match="raw node features"):
        ch.broadcast("halo_x", torch.zeros(1), [0, 1], 1)
    # a reserved raw kind is refused even where its declaration forgot raw=True
    ch = Channel({"labels": Message(reason="labels, not flagged raw")})
    with pytest.raises(ChannelError, match="raw node features"):
        ch.send("labels", torch.zeros(1), 0, 1, 1)


def test_releases_go_through_privacy_and_receiver_gets_the_result():
    class Doubler:
        def release(self, kind, payload, src, round):
            return payload * 2

        def aggregate(self, kind, payload, num_contributors, round):
            return payload + 1

    ch = Channel({"emb": Message(release=True), "w": Message()}, privacy=Doubler())
    assert torch.equal(ch.send("emb", torch.ones(2), 0, 1, 1), torch.full((2,), 2.0))
    assert torch.equal(ch.send("w", torch.ones(2), 0, 1, 1), torch.ones(2))
    assert torch.equal(ch.aggregate("w", torch.ones(2), 3, 1), torch.full((2,), 2.0))


def test_auditor_sees_every_payload():
    seen = []
    ch = Channel({"w": Message()}, auditor=lambda *a: seen.append(a[0]))
    ch.send("w", torch.zeros(1), 0, "server", 1)
    ch.broadcast("w", torch.zeros(1), [0, 1], 1)
    assert seen == ["w", "w", "w"]
