"""Shamir's t-of-n secret sharing over the prime field GF(2^127 - 1), and the toy Diffie-Hellman key
agreement in the same field, for the pairwise-masking secure aggregation (fgx/federation/secagg.py).

Written by hand: the protocol needs only sharing and Lagrange interpolation at 0 of 127-bit integers
(about 30 lines). PyCryptodome's ``Crypto.Protocol.SecretSharing.Shamir`` works on 16-byte secrets in
GF(2^128) and would fit, but it would be a dependency of fgx's core for these few lines; the tests
check reconstruction from every t-subset and refusal below t.

The key agreement is a simulation of the protocol's algebra, not of its security: Diffie-Hellman in the
multiplicative group of GF(2^127 - 1) is far too small a group to resist a discrete logarithm, and the
secret keys are drawn from the run's seed (reproducible runs), not from the operating system's CSPRNG.
A deployment uses X25519 (Bonawitz et al. 2017, section 4) and authenticated encryption of the shares."""
from __future__ import annotations

import random

PRIME = (1 << 127) - 1      # a Mersenne prime: every secret and share is an integer below it
GENERATOR = 3               # the key agreement's base: public key g^sk, shared secret (g^sk_j)^sk_i
SECRET_BYTES = 16           # one field element on the wire


def random_element(rng: random.Random) -> int:
    """A uniform non-zero field element."""
    return rng.randrange(1, PRIME)


def share(secret: int, n: int, t: int, rng: random.Random) -> list[int]:
    """``n`` shares of ``secret``; share i (0-based) is f(i + 1) for a random polynomial f of degree
    t - 1 with f(0) = secret, so any ``t`` of them give the secret and fewer give nothing."""
    if not 1 <= t <= n:
        raise ValueError(f"Shamir threshold t={t} must lie in 1..n={n}")
    if not 0 <= secret < PRIME:
        raise ValueError("secret out of the field")
    coeffs = [secret] + [rng.randrange(PRIME) for _ in range(t - 1)]
    out = []
    for x in range(1, n + 1):
        acc = 0
        for c in reversed(coeffs):           # Horner
            acc = (acc * x + c) % PRIME
        out.append(acc)
    return out


def reconstruct(shares: dict[int, int], t: int) -> int:
    """The secret from at least ``t`` shares {i (0-based holder index): f(i + 1)}: Lagrange
    interpolation at 0 over the first ``t`` of them."""
    if len(shares) < t:
        raise ValueError(f"{len(shares)} shares cannot reconstruct a secret shared with threshold {t}")
    xs = [i + 1 for i in sorted(shares)[:t]]
    ys = [shares[x - 1] for x in xs]
    secret = 0
    for j, (xj, yj) in enumerate(zip(xs, ys)):
        num, den = 1, 1
        for m, xm in enumerate(xs):
            if m != j:
                num = num * (-xm) % PRIME
                den = den * (xj - xm) % PRIME
        secret = (secret + yj * num * pow(den, PRIME - 2, PRIME)) % PRIME
    return secret


def public_key(secret_key: int) -> int:
    return pow(GENERATOR, secret_key, PRIME)


def agree(secret_key: int, other_public_key: int) -> int:
    """The pair's shared secret: (g^sk_j)^sk_i = (g^sk_i)^sk_j."""
    return pow(other_public_key, secret_key, PRIME)
