"""Every message between clients and the server passes through one Channel.

It (1) refuses payload kinds the algorithm did not declare, and raw features/labels unless the
algorithm declares them with a reason and the dataset allows it, (2) counts bytes per kind and
round, (3) applies the privacy mechanism to declared releases, returning what the receiver sees,
and (4) shows each payload to an optional auditor."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable

import torch

RAW_KINDS = ("raw_features", "labels")


class ChannelError(RuntimeError):
    pass


@dataclass(frozen=True)
class Message:
    direction: str = "any"        # "up" (client->server), "down", "peer" or "any": documentation
    release: bool = False         # passes through the privacy mechanism
    raw: bool = False             # carries raw node features or labels (needs a reason)
    reason: str = ""


def payload_tensors(payload: Any):
    """Every tensor inside a payload (nested dicts, lists and tuples), in order."""
    if isinstance(payload, torch.Tensor):
        yield payload
    elif isinstance(payload, dict):
        for v in payload.values():
            yield from payload_tensors(v)
    elif isinstance(payload, (list, tuple)):
        for v in payload:
            yield from payload_tensors(v)


def payload_bytes(payload: Any) -> int:
    if isinstance(payload, torch.Tensor):
        return payload.numel() * payload.element_size()
    if isinstance(payload, dict):
        return sum(payload_bytes(v) for v in payload.values())
    if isinstance(payload, (list, tuple)):
        return sum(payload_bytes(v) for v in payload)
    if isinstance(payload, (int, float, bool)):
        return 8
    if payload is None:
        return 0
    raise ChannelError(f"payload of type {type(payload).__name__} cannot be sent: use tensors, "
                       f"numbers, or dicts/lists of them")


class Channel:
    def __init__(self, messages: dict[str, Message], privacy=None, features_public: bool = False,
                 auditor: Callable | None = None):
        for kind, m in messages.items():
            if (kind in RAW_KINDS or m.raw) and not m.reason:
                raise ChannelError(f"message kind '{kind}' carries raw data and must declare a reason")
        self.messages = dict(messages)
        self.privacy = privacy
        self.features_public = features_public
        self.auditor = auditor
        self.bytes: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.counts: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))

    def _check(self, kind: str) -> Message:
        if kind not in self.messages:
            raise ChannelError(f"message kind '{kind}' was not declared by the algorithm "
                               f"(declared: {sorted(self.messages)})")
        m = self.messages[kind]
        if (kind in RAW_KINDS or m.raw) and not self.features_public:
            raise ChannelError(f"message kind '{kind}' would send raw node features or labels off a client, "
                               f"and the dataset does not declare its features public")
        return m

    def send(self, kind: str, payload: Any, src, dst, round: int) -> Any:
        m = self._check(kind)
        if m.release and self.privacy is not None:
            payload = self.privacy.release(kind, payload, src=src, round=round)
        self.bytes[round][kind] += payload_bytes(payload)
        self.counts[round][kind] += 1
        if self.auditor is not None:
            self.auditor(kind, payload, src, dst, round)
        return payload

    def broadcast(self, kind: str, payload: Any, dsts, round: int, src="server") -> Any:
        """``src`` (the server, or a peer in decentralised runs) sends the same payload to each of
        ``dsts``: the privacy mechanism sees it once, bytes are counted per receiver, and the
        returned payload is what every receiver gets (and what a peer sender keeps)."""
        m = self._check(kind)
        if m.release and self.privacy is not None:
            payload = self.privacy.release(kind, payload, src=src, round=round)
        dsts = list(dsts)
        self.bytes[round][kind] += payload_bytes(payload) * len(dsts)
        self.counts[round][kind] += len(dsts)
        if self.auditor is not None:
            for d in dsts:
                self.auditor(kind, payload, src, d, round)
        return payload

    def aggregate(self, kind: str, payload: Any, num_contributors: int, round: int) -> Any:
        """A server-side aggregate of ``kind`` messages: the privacy mechanism may noise it."""
        self._check(kind)
        if self.privacy is not None:
            payload = self.privacy.aggregate(kind, payload, num_contributors=num_contributors, round=round)
        return payload

    def round_bytes(self, round: int) -> dict[str, int]:
        return dict(self.bytes.get(round, {}))

    def report(self) -> dict:
        per_round = {str(r): dict(v) for r, v in sorted(self.bytes.items())}
        totals: dict[str, int] = defaultdict(int)
        for v in self.bytes.values():
            for k, b in v.items():
                totals[k] += b
        msgs: dict[str, int] = defaultdict(int)
        for v in self.counts.values():
            for k, c in v.items():
                msgs[k] += c
        return {"per_round": per_round, "totals": dict(totals), "total_bytes": int(sum(totals.values())),
                "messages": dict(msgs)}

    def state_dict(self) -> dict:
        return {"bytes": {r: dict(v) for r, v in self.bytes.items()},
                "counts": {r: dict(v) for r, v in self.counts.items()}}

    def load_state_dict(self, state: dict) -> None:
        for r, v in state["bytes"].items():
            self.bytes[int(r)].update(v)
        for r, v in state["counts"].items():
            self.counts[int(r)].update(v)
