"""Provider failures, each carrying one line a user can act on."""

from __future__ import annotations

from hotloop import InputError


class ProviderError(Exception):
    """A request to a provider failed. `str(error)` is the one-line message shown to the user.

    `retryable` says whether the same request may succeed if sent again; `status` is the HTTP
    status the server answered, and `retry_after` the wait it asked for, in seconds, if any.
    """

    kind = "provider"

    def __init__(
        self, message: str, *, status: int | None = None, retry_after: float | None = None, retryable: bool = False
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after
        self.retryable = retryable


class ConnectionFailed(ProviderError):
    kind = "unreachable"


class AuthenticationFailed(ProviderError):
    kind = "auth"


class UnknownModel(ProviderError):
    kind = "unknown_model"


class RequestRejected(ProviderError):
    kind = "rejected"


class Stalled(ProviderError):
    """The server sent nothing for longer than the provider's request timeout allows."""

    kind = "stalled"


class StreamInterrupted(ProviderError):
    """The response stopped before the model finished its message."""

    kind = "interrupted"


class MissingApiKey(ProviderError, InputError):
    kind = "missing_key"
