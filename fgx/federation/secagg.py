"""Pairwise-masking secure aggregation (Bonawitz et al., CCS 2017, "Practical Secure Aggregation for
Privacy-Preserving Machine Learning"), in fixed point, with clients that drop out after masking.

One round, for the chosen clients 1..n (each step's messages go through the run's channel, so their
bytes are in the ledger and an auditor sees exactly what the server sees):

1. Keys (``secagg_public_key`` up, ``secagg_public_keys`` down): client i draws a secret key sk_i and a
   self-mask seed b_i, and announces its public key g^sk_i; the server broadcasts them all.
2. Shares (``secagg_shares`` up, ``secagg_shares_routed`` down): client i Shamir-shares sk_i and b_i
   t-of-n, one share pair per client, routed through the server (the paper encrypts each pair for its
   recipient under their agreed key; here the shares travel as they are and their bytes are counted).
3. Masked input (``masked_update`` up): client i encodes its weighted update x_i in fixed point,
   q_i = round(x_i 2^f) in the ring Z_{2^62}, and sends
   y_i = q_i + PRG(b_i) + sum_{j>i} PRG(s_ij) - sum_{j<i} PRG(s_ij)   (mod 2^62),
   s_ij = agree(sk_i, pk_j) = agree(sk_j, pk_i). Clients that drop out send nothing from here on.
4. Unmasking (``secagg_dropped`` down, ``secagg_unmask_shares`` up): the server names the dropped
   set D; every surviving client returns its share of b_i for each survivor i and of sk_u for each
   u in D (never both for one client, or the server could unmask that client's input). With t shares
   the server rebuilds the b_i and the sk_u, regenerates the survivors' self-masks and the pairwise masks
   between each dropped client and each survivor, and removes them:
   sum_{i survived} y_i - sum_i PRG(b_i) -/+ sum_{u in D, j survived} PRG(s_uj) = sum_{i survived} q_i.

The pairwise masks between two survivors cancel in the sum, so the result equals the fixed-point sum of
the surviving clients' encodings exactly (integers, no rounding beyond the encoding's). The server never
holds a client's unmasked q_i. Simulation: every client's work runs in this process, the key agreement
is fgx/federation/shamir.py's toy Diffie-Hellman, and the mask PRG is torch's Mersenne Twister seeded
by a SHA-256 of the shared secret (a deployment uses AES in counter mode): the protocol's algebra and
costs, not its cryptographic strength (docs/threats.md)."""
from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

import torch

from fgx.federation import shamir

RING_BITS = 62                  # values live in Z_{2^62}: a sum of two stays below 2^63 (no int64 overflow)
RING_MASK = (1 << RING_BITS) - 1
HALF_RING = 1 << (RING_BITS - 1)


def encode(x: torch.Tensor, fractional_bits: int) -> torch.Tensor:
    """Fixed point in the ring: round(x 2^f), two's complement in 62 bits."""
    return torch.round(x.double() * (1 << fractional_bits)).long() & RING_MASK


def decode_signed(q: torch.Tensor) -> torch.Tensor:
    """Ring elements back to signed integers (the upper half of the ring is negative)."""
    return torch.where(q >= HALF_RING, q - (1 << RING_BITS), q)


def check_range(x: torch.Tensor, fractional_bits: int, n: int) -> None:
    """A sum of ``n`` encodings must stay in the signed half-ring, or it wraps silently: refuse instead."""
    peak = float(x.abs().max()) if x.numel() else 0.0
    if peak * (1 << fractional_bits) * max(n, 1) >= HALF_RING:
        raise OverflowError(f"secure aggregation: an update coordinate of magnitude {peak:.3g} from {n} clients "
                            f"overflows the fixed-point ring (2^{RING_BITS} with {fractional_bits} fractional "
                            f"bits); lower secure_aggregation.fractional_bits")


def prg(secret: int, tag: bytes, length: int) -> torch.Tensor:
    """``length`` uniform ring elements expanded from a shared secret."""
    digest = hashlib.sha256(tag + secret.to_bytes(shamir.SECRET_BYTES, "little")).digest()
    g = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1)
    return torch.randint(0, 1 << RING_BITS, (length,), generator=g, dtype=torch.int64)


def as_bytes(values: list[int]) -> torch.Tensor:
    """Field elements as the bytes that go on the wire (16 each)."""
    raw = b"".join(v.to_bytes(shamir.SECRET_BYTES, "little") for v in values)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8)


def from_bytes(t: torch.Tensor) -> list[int]:
    raw = bytes(t.tolist())
    w = shamir.SECRET_BYTES
    return [int.from_bytes(raw[k:k + w], "little") for k in range(0, len(raw), w)]


@dataclass
class MaskingClient:
    """One chosen client's secrets for one round (held on the client; the server never sees them)."""
    cid: int
    secret_key: int
    self_mask_seed: int
    public_keys: dict | None = None             # cid -> pk, as the server broadcast them
    held: dict | None = None                    # cid -> (share of sk_cid, share of b_cid) this client holds


MESSAGES = ("secagg_public_key", "secagg_public_keys", "secagg_shares", "secagg_shares_routed",
            "masked_update", "secagg_dropped", "secagg_unmask_shares")


class PairwiseMasking:
    """The protocol above for one run: ``sum(channel, cids, vectors, dropped, r)`` returns the exact
    fixed-point sum of the surviving clients' vectors and the survivors."""

    def __init__(self, fractional_bits: int, threshold: float, seed: int):
        self.f = fractional_bits
        self.threshold = threshold
        self.seed = seed

    def shamir_threshold(self, n: int) -> int:
        return min(n, int(self.threshold * n) + 1)

    def _client(self, cid: int, r: int) -> MaskingClient:
        # each client's randomness from (run seed, round, client): a reproducible simulation of its CSPRNG
        rng = random.Random(hashlib.sha256(f"secagg/{self.seed}/{r}/{cid}".encode()).digest())
        return MaskingClient(cid, shamir.random_element(rng), shamir.random_element(rng))

    def sum(self, channel, cids: list[int], vectors: list[torch.Tensor], dropped: set[int], r: int
            ) -> tuple[torch.Tensor, list[int]]:
        n, d = len(cids), vectors[0].numel()
        t = self.shamir_threshold(n)
        survivors = [c for c in cids if c not in dropped]
        if len(survivors) < t:
            raise RuntimeError(f"secure aggregation round {r}: {len(survivors)} of {n} clients survived, fewer "
                               f"than the {t} shares needed to unmask (secure_aggregation.threshold)")
        for x in vectors:
            check_range(x, self.f, n)
        clients = {c: self._client(c, r) for c in cids}
        pos = {c: k for k, c in enumerate(cids)}          # Shamir holder index

        # 1. public keys up, and the list of them down
        pks = {c: from_bytes(channel.send("secagg_public_key", as_bytes([shamir.public_key(m.secret_key)]),
                                          src=c, dst="server", round=r))[0] for c, m in clients.items()}
        listed = channel.broadcast("secagg_public_keys", as_bytes([pks[c] for c in cids]), cids, r)
        for m in clients.values():
            m.public_keys = dict(zip(cids, from_bytes(listed)))

        # 2. each client's t-of-n shares of (sk, b), routed to their holders through the server
        outbox = {}
        for c, m in clients.items():
            rng = random.Random(hashlib.sha256(f"secagg-shares/{self.seed}/{r}/{c}".encode()).digest())
            sk_shares = shamir.share(m.secret_key, n, t, rng)
            b_shares = shamir.share(m.self_mask_seed, n, t, rng)
            sent = channel.send("secagg_shares", as_bytes([v for pair in zip(sk_shares, b_shares) for v in pair]),
                                src=c, dst="server", round=r)
            outbox[c] = from_bytes(sent)
        for c, m in clients.items():
            k = pos[c]
            routed = channel.send("secagg_shares_routed", as_bytes([v for o in cids for v in outbox[o][2 * k:2 * k + 2]]),
                                  src="server", dst=c, round=r)
            vals = from_bytes(routed)
            m.held = {o: (vals[2 * j], vals[2 * j + 1]) for j, o in enumerate(cids)}

        # 3. masked inputs from the clients that are still there
        total = torch.zeros(d, dtype=torch.int64)
        for c, x in zip(cids, vectors):
            if c in dropped:
                continue
            y = masked_input(clients[c], encode(x.view(-1), self.f), cids, r)
            total = (total + channel.send("masked_update", y, src=c, dst="server", round=r)) & RING_MASK

        # 4. the dropped set down; the survivors' shares up; the masks removed
        channel.broadcast("secagg_dropped", torch.tensor(sorted(dropped), dtype=torch.int64), survivors, r)
        b_shares: dict[int, dict[int, int]] = {c: {} for c in survivors}
        sk_shares: dict[int, dict[int, int]] = {u: {} for u in dropped}
        for j in survivors:
            held = clients[j].held
            answer = [held[c][1] for c in survivors] + [held[u][0] for u in sorted(dropped)]
            got = from_bytes(channel.send("secagg_unmask_shares", as_bytes(answer), src=j, dst="server", round=r))
            for k, c in enumerate(survivors):
                b_shares[c][pos[j]] = got[k]
            for k, u in enumerate(sorted(dropped)):
                sk_shares[u][pos[j]] = got[len(survivors) + k]
        total = unmask(total, {c: shamir.reconstruct(b_shares[c], t) for c in survivors},
                       {u: shamir.reconstruct(sk_shares[u], t) for u in dropped}, pks, cids, r)
        return decode_signed(total).double() / (1 << self.f), survivors


def masked_input(client: MaskingClient, q: torch.Tensor, cids: list[int], r: int) -> torch.Tensor:
    """y_i = q_i + PRG(b_i) + sum_{j>i} PRG(s_ij) - sum_{j<i} PRG(s_ij) (mod 2^62)."""
    d = q.numel()
    y = (q + prg(client.self_mask_seed, b"self/%d" % r, d)) & RING_MASK
    for other in cids:
        if other == client.cid:
            continue
        mask = prg(shamir.agree(client.secret_key, client.public_keys[other]), pair_tag(client.cid, other, r), d)
        y = (y + mask if client.cid < other else y - mask) & RING_MASK
    return y


def pair_tag(a: int, b: int, r: int) -> bytes:
    return b"pair/%d/%d/%d" % (min(a, b), max(a, b), r)


def unmask(total: torch.Tensor, self_seeds: dict[int, int], dropped_keys: dict[int, int], pks: dict[int, int],
           cids: list[int], r: int) -> torch.Tensor:
    """The sum of the survivors' masked inputs less their self-masks and the pairwise masks they share
    with the dropped clients (rebuilt from each dropped client's reconstructed secret key and the
    survivor's public key)."""
    d = total.numel()
    for c, b in self_seeds.items():
        total = (total - prg(b, b"self/%d" % r, d)) & RING_MASK
    for u, sk in dropped_keys.items():
        for j in self_seeds:
            mask = prg(shamir.agree(sk, pks[j]), pair_tag(u, j, r), d)
            # survivor j added +mask when j < u, -mask when j > u: take its contribution back out
            total = (total - mask if j < u else total + mask) & RING_MASK
    return total
