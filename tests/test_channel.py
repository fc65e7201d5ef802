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


# The tests below were written from the survivors of `scripts/mutation.sh fgx/federation/channel.py`
# (docs/mutation/fgx_federation_channel_py.md): each pins a detail of the channel's contract.

def test_payload_bytes_of_every_payload_shape():
    t = torch.zeros(3, dtype=torch.float32)
    assert payload_bytes([t, t]) == payload_bytes((t, t)) == 24
    assert payload_bytes({"a": [t, 1.5], "b": None}) == 12 + 8
    assert payload_bytes(7) == payload_bytes(0.5) == payload_bytes(True) == 8
    assert payload_bytes(None) == 0
    with pytest.raises(ChannelError, match="payload of type str cannot be sent"):
        payload_bytes("a string")


def test_payload_tensors_walks_dicts_lists_and_tuples_in_order():
    from fgx.federation.channel import payload_tensors
    a, b, c = torch.zeros(1), torch.ones(2), torch.full((3,), 2.0)
    found = list(payload_tensors({"x": [a, (b, 3)], "y": c, "z": None}))
    assert [t.numel() for t in found] == [1, 2, 3]
    assert all(f is t for f, t in zip(found, (a, b, c)))


class _RecordingPrivacy:
    def __init__(self):
        self.calls = []

    def release(self, kind, payload, src, round):
        self.calls.append(("release", kind, src, round))
        return payload

    def aggregate(self, kind, payload, num_contributors, round):
        self.calls.append(("aggregate", kind, num_contributors, round))
        return payload


def test_privacy_sees_who_releases_in_which_round_and_only_declared_releases():
    privacy = _RecordingPrivacy()
    ch = Channel({"emb": Message(release=True), "w": Message()}, privacy=privacy)
    ch.send("emb", torch.ones(1), src=4, dst="server", round=3)
    ch.broadcast("emb", torch.ones(1), dsts=[0, 1], round=5)
    ch.broadcast("emb", torch.ones(1), dsts=[0], round=6, src=2)
    ch.send("w", torch.ones(1), src=4, dst="server", round=3)        # not a release: privacy never sees it
    ch.broadcast("w", torch.ones(1), dsts=[0, 1], round=5)
    ch.aggregate("w", torch.ones(1), num_contributors=7, round=8)
    assert privacy.calls == [("release", "emb", 4, 3), ("release", "emb", "server", 5),
                             ("release", "emb", 2, 6), ("aggregate", "w", 7, 8)]


def test_broadcasts_accumulate_and_the_auditor_sees_each_receiver():
    seen = []
    ch = Channel({"g": Message()}, auditor=lambda kind, payload, src, dst, round: seen.append((src, dst, round)))
    ch.broadcast("g", torch.zeros(2), dsts=iter([0, 1]), round=1)
    ch.broadcast("g", torch.zeros(2), dsts=[2], round=1)
    assert ch.round_bytes(1) == {"g": 3 * 8}
    assert ch.report()["messages"] == {"g": 3}
    assert seen == [("server", 0, 1), ("server", 1, 1), ("server", 2, 1)]
    assert ch.round_bytes(99) == {}
