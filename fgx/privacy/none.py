"""``privacy=none``: messages are sent as computed; nothing is accounted."""
from __future__ import annotations

from dataclasses import dataclass

from fgx.privacy.base import PrivacyMechanism, PrivacyParams
from fgx.registry import PRIVACY


@dataclass
class NoPrivacyParams(PrivacyParams):
    pass


@PRIVACY.register("none", params=NoPrivacyParams)
class NoPrivacy(PrivacyMechanism):
    name = "none"
    accounts = False

    def report(self) -> dict:
        return {"mechanism": "none", "budget_spent": None,
                "note": "no privacy mechanism: messages are sent as computed"}
