"""A key's policy as admission reads it: its limits, the models it may use, whether it is an
admin (from its `[[api_keys]]` table)."""

from __future__ import annotations

from dataclasses import dataclass

from codexgate.config import ApiKeyConfig
from codexgate.store.meter import KeyLimits

__all__ = ["KeyPolicy"]


@dataclass(frozen=True, slots=True)
class KeyPolicy:
    """What admission knows of a key: its limits, the models it may use, whether it is an admin."""

    name: str
    limits: KeyLimits
    models: frozenset[str] | None = None
    admin: bool = False

    @property
    def counted(self) -> bool:
        limits = self.limits
        return any(
            n is not None
            for n in (limits.requests_per_minute, limits.tokens_per_minute, limits.tokens_per_day,
                      limits.max_concurrent)
        )  # fmt: skip

    @property
    def spends_tokens(self) -> bool:
        """Whether the key's answers count against a token limit (charged as each one ends)."""
        return self.limits.tokens_per_minute is not None or self.limits.tokens_per_day is not None

    @classmethod
    def of(cls, config: ApiKeyConfig) -> KeyPolicy:
        limits = KeyLimits(
            config.requests_per_minute, config.tokens_per_minute, config.tokens_per_day, config.max_concurrent
        )
        models = frozenset(config.models) if config.models is not None else None
        return cls(config.name, limits, models, config.admin)
