"""Provider failures, each carrying one line a user can act on."""

from __future__ import annotations

from hotloop import InputError


class ProviderError(Exception):
    """A request to a provider failed. `str(error)` is the one-line message shown to the user."""

    kind = "provider"


class ConnectionFailed(ProviderError):
    kind = "unreachable"


class AuthenticationFailed(ProviderError):
    kind = "auth"


class UnknownModel(ProviderError):
    kind = "unknown_model"


class RequestRejected(ProviderError):
    kind = "rejected"


class StreamInterrupted(ProviderError):
    """The response stopped before the model finished its message."""

    kind = "interrupted"


class MissingApiKey(ProviderError, InputError):
    kind = "missing_key"
