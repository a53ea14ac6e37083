"""The TLS context every provider's client shares.

Each SDK client makes its own by default, loading the system's certificate store (tens of ms on a quiet machine,
a second and more under load), and one more per proxy variable set (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`: each
adds a transport to the client). Made once, the store is loaded once per process.
"""

from __future__ import annotations

import ssl
import threading

_LOCK = threading.Lock()
_CONTEXT: list[ssl.SSLContext] = []


def tls_context() -> ssl.SSLContext:
    """The shared context, made on first use: the SDKs' own default, `SSL_CERT_FILE` and `SSL_CERT_DIR` honoured."""
    import httpx2

    with _LOCK:  # clients are built in worker threads: two first ones would each load the store
        if not _CONTEXT:
            _CONTEXT.append(httpx2.create_ssl_context())
        return _CONTEXT[0]
