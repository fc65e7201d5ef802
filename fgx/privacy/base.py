"""Privacy mechanisms sit in the channel: ``release`` sees every declared release before the
receiver does, ``aggregate`` sees server-side aggregates. ``privacy=none`` changes nothing.

**Coverage rule** (one rule for every mechanism and algorithm): a mechanism declares, in
``covers(params)``, the message kinds whose every release its privacy budget accounts for. Before
any work, a run whose mechanism claims a budget (``accounts = True``) is refused when the algorithm
sends, from its clients, a kind the mechanism does not cover, unless the config marks that kind
public explicitly (``privacy.public_messages``). A covered kind must be declared ``release=True`` by
the algorithm, so that every payload of it passes through the mechanism. Server-to-client kinds
(``direction="down"``) are functions of what the server received and need no coverage of their
own; raw-data kinds are sent only when the dataset declares its features public. privacy.json
lists what the budget covers (``messages``)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fgx.config import ConfigError, spec
from fgx.privacy.audit import AuditParams


@dataclass
class PrivacyParams:
    """Options every mechanism has (mechanism params dataclasses inherit from this)."""
    public_messages: list[str] = field(default_factory=list, metadata=spec(
        help="message kinds the algorithm's clients send that you declare public: no budget covers them, "
             "and privacy.json says so (needed when the mechanism does not cover a kind)"))
    audit: AuditParams = field(default_factory=AuditParams)   # one-run canary audit (fgx/privacy/audit/)


class PrivacyMechanism:
    name = "base"
    accounts = True      # claims a privacy budget: every client-sent message kind must be covered or public

    @classmethod
    def check_coverage(cls, validated) -> "Coverage":
        """The coverage rule and the audit's checks, before any other check of a config (fgx.config.validate
        calls it through the registry, so the config machinery imports nothing of fgx/privacy)."""
        return check_coverage(validated)

    @classmethod
    def covers(cls, params) -> set[str]:
        """Message kinds whose every release this mechanism's budget accounts for."""
        return set()

    def __init__(self, params, ctx=None):
        self.params = params
        self.ctx = ctx

    def bind(self, ctx) -> None:
        """Called once the run's context exists (clients, info, seed, device)."""
        self.ctx = ctx

    def release(self, kind: str, payload: Any, src, round: int) -> Any:
        return payload

    def aggregate(self, kind: str, payload: Any, num_contributors: int, round: int) -> Any:
        return payload

    def on_round_end(self, round: int) -> dict[str, float]:
        return {}

    def finish(self, algo) -> None:
        """Called once after the last round, before ``report``, with the trained algorithm."""

    def report(self) -> dict:
        return {"mechanism": self.name}

    def headline(self) -> dict:
        return {"mechanism": self.name}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


class NoiseMeter:
    """The noise-to-signal diagnostic of a mechanism: ‖noise‖ / ‖what it was added to‖ over a round's
    releases (squared norms summed, then the ratio), returned by ``on_round_end`` to metrics.jsonl."""

    def __init__(self):
        self.signal_sq, self.noise_sq = 0.0, 0.0

    def add(self, signal, noise) -> None:
        self.signal_sq += float(signal.double().pow(2).sum())
        self.noise_sq += float(noise.double().pow(2).sum())

    def take(self) -> dict[str, float]:
        out = {"noise_to_signal": (self.noise_sq / max(self.signal_sq, 1e-300)) ** 0.5} if self.noise_sq else {}
        self.signal_sq, self.noise_sq = 0.0, 0.0
        return out


CLIENT_DIRECTIONS = ("up", "peer", "any")


@dataclass(frozen=True)
class Coverage:
    """Which of an algorithm's message kinds a mechanism's budget covers."""
    mechanism: str
    accounts: bool
    covered: tuple[str, ...]          # sent by clients, accounted for by the budget
    public: tuple[str, ...]           # sent by clients, marked public in the config (privacy.public_messages)
    raw: tuple[str, ...]              # raw data: sent only when the dataset declares its features public
    uncovered: tuple[str, ...]        # sent by clients and covered by nothing
    server: tuple[str, ...]           # server-to-client: functions of what the server received

    def as_dict(self, features_public: bool | None = None) -> dict:
        out = {"epsilon_covers": list(self.covered) if self.accounts else [],
               "public_by_config": list(self.public),
               "raw_data": list(self.raw),
               "not_covered": list(self.uncovered),
               "server_to_client": list(self.server)}
        if features_public is not None and self.raw:
            out["raw_data_sent"] = bool(features_public)
        if not self.accounts:
            out["note"] = "no privacy mechanism: every message kind is sent as computed"
        else:
            out["note"] = ("the budget covers every release of the epsilon_covers kinds; public_by_config kinds "
                           "are declared public in the config and covered by nothing; server_to_client kinds are "
                           "post-processing of what clients sent")
        return out


def coverage(mechanism_cls, params, messages: dict) -> Coverage:
    claimed = set(mechanism_cls.covers(params)) if mechanism_cls.accounts else set()
    public = set(getattr(params, "public_messages", None) or [])
    covered, pub, raw, uncovered, server = [], [], [], [], []
    for kind, m in sorted(messages.items()):
        if m.direction not in CLIENT_DIRECTIONS:
            server.append(kind)
        elif m.raw:
            raw.append(kind)
        elif kind in claimed and m.release and mechanism_cls.accounts:
            covered.append(kind)
        elif kind in public:
            pub.append(kind)
        else:
            uncovered.append(kind)
    return Coverage(mechanism_cls.name, bool(mechanism_cls.accounts), tuple(covered), tuple(pub), tuple(raw),
                    tuple(uncovered), tuple(server))


def algorithm_messages(algo_cls, params) -> dict:
    return algo_cls.messages_for(params)


def check_coverage(validated) -> Coverage:
    """The coverage rule, before any work: raises ConfigError naming the uncovered kinds."""
    from fgx.privacy.audit import check
    check(validated)                     # privacy.audit: an auditable mechanism, an uninterrupted run
    mech = validated.entries["privacy"].obj
    params = validated.params["privacy"]
    algo_name, mech_name = validated.names["algorithm"], validated.names["privacy"]
    messages = algorithm_messages(validated.entries["algorithm"].obj, validated.params["algorithm"])
    unknown = sorted(set(params.public_messages or []) - set(messages))
    if unknown:
        raise ConfigError("privacy.public_messages", unknown, f"message kinds algorithm '{algo_name}' declares: "
                          f"{sorted(messages)}")
    cov = coverage(mech, params, messages)
    if cov.accounts and cov.uncovered:
        claimed = sorted(mech.covers(params))
        unrouted = sorted(k for k in claimed if k in messages and not messages[k].release)
        why = f" ({unrouted} not declared release=True, so the mechanism never sees them)" if unrouted else ""
        listed = ",".join(cov.uncovered)
        raise ConfigError("privacy.name", mech_name,
                          f"a mechanism whose budget covers every message kind algorithm '{algo_name}' sends from "
                          f"its clients: '{mech_name}' covers {claimed}{why}, not {list(cov.uncovered)}, which "
                          f"'{algo_name}' sends. Use privacy=none, or declare those kinds public explicitly: "
                          f"privacy.public_messages=[{listed}] (privacy.json then says the ε does not cover them)")
    return cov
