"""The error a bad config value raises, in a module of its own so that every part of fgx (the
registries included) can raise it without importing the config machinery (fgx/config.py re-exports it)."""
from __future__ import annotations

from typing import Any


class ConfigError(ValueError):
    """A config value that cannot be used. ``key`` is the full dotted key."""

    def __init__(self, key: str, value: Any, allowed: str):
        self.key, self.value, self.allowed = key, value, allowed
        super().__init__(f"config error: {key}={value!r} is not allowed; allowed: {allowed}")
