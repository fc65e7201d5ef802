"""Aggregation under CKKS homomorphic encryption through TenSEAL (FedGraph's choice): the clients encrypt
their weighted updates, the server adds the ciphertexts without being able to read them, and the key
holder decrypts only the sum.

Keys: one CKKS key pair for the run, made by a simulated key holder and shared by the clients (the
clients' shared key, as in FedGraph's single-key setting); the server gets the context with the secret
key removed (``make_context_public``), sent once (``ckks_public_context``). Each round:
``encrypted_update`` (client -> server, the serialized ciphertexts), ``encrypted_sum`` (server -> key
holder, the serialized sum) and ``decrypted_sum`` (key holder -> server, the plain float64 sum). Every
payload is the bytes TenSEAL serializes, so the ledger counts what would travel; the server really
deserializes each ciphertext under the public context and adds them.

Precision: CKKS is approximate; with scale 2^40 a coordinate of the decrypted sum is within about 1e-7 of
the plain sum for |values| ~ 1 (the tests ask for 1e-4). Encryption draws from SEAL's own random
generator, so a CKKS run is not bit-for-bit reproducible (the low bits of the sum vary)."""
from __future__ import annotations

import torch

MESSAGES = ("ckks_public_context", "encrypted_update", "encrypted_sum", "decrypted_sum")


def _tenseal():
    try:
        import tenseal
    except ImportError as e:       # checked at validation too (fgx/federation/secure.py)
        raise ImportError("secure_aggregation=ckks needs TenSEAL: pip install 'fgx[tenseal]'") from e
    return tenseal


def wire(raw: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8)


def unwire(t: torch.Tensor) -> bytes:
    return t.numpy().tobytes()


class CKKSAggregation:
    def __init__(self, poly_modulus_degree: int, coeff_mod_bit_sizes: list[int], scale_bits: int):
        ts = _tenseal()
        self.ts = ts
        self.secret = ts.context(ts.SCHEME_TYPE.CKKS, poly_modulus_degree=poly_modulus_degree,
                                 coeff_mod_bit_sizes=list(coeff_mod_bit_sizes))
        self.secret.global_scale = 2 ** scale_bits
        self.slots = poly_modulus_degree // 2
        self.public_bytes = self.secret.copy()
        self.public_bytes.make_context_public()
        self.public_bytes = self.public_bytes.serialize()
        self.server_context = None          # what the server holds: the public context, once it was sent

    def _chunks(self, x: torch.Tensor) -> list[list[float]]:
        v = x.double().view(-1).tolist()
        return [v[k:k + self.slots] for k in range(0, len(v), self.slots)]

    def sum(self, channel, cids: list[int], vectors: list[torch.Tensor], key_holder: int, r: int) -> torch.Tensor:
        ts = self.ts
        if self.server_context is None:
            got = channel.send("ckks_public_context", wire(self.public_bytes), src=key_holder, dst="server", round=r)
            self.server_context = ts.context_from(unwire(got))
            if self.server_context.is_private():
                raise RuntimeError("the server's CKKS context holds the secret key")
        total = None
        for c, x in zip(cids, vectors):
            sent = channel.send("encrypted_update", [wire(ts.ckks_vector(self.secret, ch).serialize())
                                                     for ch in self._chunks(x)], src=c, dst="server", round=r)
            cts = [ts.ckks_vector_from(self.server_context, unwire(b)) for b in sent]
            total = cts if total is None else add_ciphertexts(total, cts)
        down = channel.send("encrypted_sum", [wire(ct.serialize()) for ct in total], src="server", dst=key_holder,
                            round=r)
        plain = [v for b in down for v in ts.ckks_vector_from(self.secret, unwire(b)).decrypt()]
        return channel.send("decrypted_sum", torch.tensor(plain, dtype=torch.float64), src=key_holder,
                            dst="server", round=r)


def add_ciphertexts(a: list, b: list) -> list:
    """The server's only operation: ciphertext + ciphertext, chunk by chunk."""
    return [x + y for x, y in zip(a, b)]
