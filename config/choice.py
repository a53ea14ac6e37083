"""What the user picked (a provider, a model, a tier, a server) and the provider and model it comes to."""

from __future__ import annotations

from dataclasses import dataclass, replace

from hotloop.config.settings import Config, ConfigError, ProviderSettings
from hotloop.providers.errors import MissingApiKey


@dataclass(frozen=True)
class Choice:
    """What the user picked on the command line or in the app; `None` means "as configured"."""

    provider: str | None = None
    model: str | None = None
    base_url: str | None = None
    tier: str | None = None


@dataclass(frozen=True)
class Target:
    """A provider and a model to use; `model=None` means "ask the server what it serves"."""

    settings: ProviderSettings
    model: str | None


def resolve(config: Config, choice: Choice) -> Target:
    """The provider and model for `choice`, or a one-line ConfigError / MissingApiKey.

    Choosing a provider or tier that doesn't exist, or one whose key is missing, fails here,
    before anything starts.
    """
    model = choice.model
    provider = choice.provider
    if choice.tier:
        if choice.provider or choice.model:
            raise ConfigError("pick a tier, or a provider and model, not both")
        tier = config.tier(choice.tier)
        provider, model = tier.provider, tier.model
    settings = config.provider(provider)
    if choice.base_url:
        config, _ = config.pointed_at(replace(choice, provider=settings.name))
        settings = config.provider(settings.name)
    if settings.key_required and not settings.api_key():
        raise MissingApiKey(f"missing API key for provider {settings.name!r}: set {settings.api_key_env}")
    return Target(settings, model or settings.default_model or (settings.models[0] if settings.models else None))
