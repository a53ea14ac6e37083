"""Which environment variables hold secrets, and which ones a command may see: one rule for every use.

`run_shell`, the hooks, `hotloop mcp import` and the session log's masking all ask here; like
`paths.py`, this imports nothing of hotloop, so any layer may.

A name is secret when one of its words (split at `_`, `-`, `.` and camelCase humps) says so:
`KEY`/`KEYS` or a compound like `APIKEY`, `ACCESSKEY`, `PRIVATEKEY`; a word ending in `TOKEN`;
anything with `SECRET`, `PASSW`, `PASSPHRASE`, `CREDENTIAL`, `COOKIE` or `WEBHOOK` in it; `AUTH`
in a word other than `AUTHOR…` (`OAUTH`, `AUTHTOKEN`, `AUTHORIZATION`); the words `PASS`, `PWD`,
`CREDS`, `PAT`, `DSN`, `JWT`, `BEARER`; a connection string; or a URL naming a database or a
broker (`DATABASE_URL`, `REDIS_URL`, `MONGODB_URI`). `KEYBOARD`, `GIT_AUTHOR_NAME`, `PATH`,
`PWD` itself and `TOKENIZERS_PARALLELISM` are not.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from itertools import pairwise

_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_SECRET_WORD = re.compile(
    r"KEYS?|[A-Z0-9]*(?:API|ACCESS|PRIVATE|PRIV|MASTER|SIGNING|LICENSE|ENCRYPTION|CLIENT|DEPLOY|SSH)KEYS?"
    r"|[A-Z0-9]*TOKENS?|[A-Z0-9]*(?:SECRET|PASSW|PASSPHRASE|CREDENTIAL|COOKIE|WEBHOOK)[A-Z0-9]*"
    r"|[A-Z0-9]*AUTH(?!OR)[A-Z0-9]*|[A-Z0-9]*AUTHORI[SZ]ATION[A-Z0-9]*"
    r"|PASS|PWD|CREDS|PAT|DSN|JWT|BEARER|CONNSTR|CONNECTIONSTRING"
)
_LOCATOR_WORDS = frozenset({"URL", "URI", "URLS", "URIS"})
# Where a URL names one of these, it carries the password more often than not (`postgres://app:…@db`).
_SERVICE_WORDS = frozenset(
    {"DATABASE", "DB", "PG", "POSTGRES", "POSTGRESQL", "MYSQL", "MARIADB", "MONGO", "MONGODB", "REDIS", "AMQP",
     "RABBITMQ", "BROKER", "CLICKHOUSE", "SQLALCHEMY"}
)  # fmt: skip
_NOT_SECRET = frozenset({"PWD", "OLDPWD"})  # the shell's working folders

# What every command gets, if hotloop has it: where programs and the home are, who and where the
# user is, how text is encoded and shown. The toolchain roots tell a tool where it is installed
# (a venv's python, a Go or Rust toolchain, nvm's node) and hold only folder paths; the CA bundle
# variables name public trust anchors, without which pip or curl fail behind a TLS-inspecting proxy.
# Left out on purpose: anything that points at an agent or a socket (SSH_AUTH_SOCK, GPG_AGENT_INFO,
# DBUS_SESSION_BUS_ADDRESS, XDG_RUNTIME_DIR, DISPLAY, WAYLAND_DISPLAY, DOCKER_HOST) and proxies,
# whose URLs may carry a password. `[shell] env` adds a name the user vouches for.
PASSED = frozenset(
    {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "TZ", "TMPDIR",
     "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "CONDA_EXE", "JAVA_HOME", "GOPATH", "GOROOT",
     "CARGO_HOME", "RUSTUP_HOME", "NVM_DIR", "NVM_BIN", "PYENV_ROOT", "RBENV_ROOT", "GEM_HOME", "GEM_PATH",
     "PNPM_HOME", "VOLTA_HOME", "BUN_INSTALL", "ASDF_DIR", "ASDF_DATA_DIR", "SDKMAN_DIR",
     "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"}
)  # fmt: skip
PASSED_PREFIXES = ("LC_",)
# A hook is the user's own command, often one that tells the user something (notify-send, a sound):
# it gets the desktop session besides, never an agent's socket nor a secret.
DESKTOP = frozenset({"DISPLAY", "WAYLAND_DISPLAY", "DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR"})

# Masking replaces a value wherever it occurs in the log, so a value that could be an ordinary word
# or number ("1", "true", "us", "postgres") would blank out unrelated text: a value is masked
# from 8 characters if it mixes two kinds of character (lower, upper, digit, other), and from 16 whatever
# it is made of. A secret weaker than that is left as it is.
MASK_MIN = 8
MASK_PLAIN_MIN = 16
_URL_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:(?P<password>[^/\s@]+)@")


def _words(name: str) -> list[str]:
    """A variable's name as upper-case words: `githubToken` and `GITHUB_TOKEN` are both GITHUB, TOKEN."""
    return [word.upper() for part in re.split(r"[^A-Za-z0-9]+", name) for word in _WORD.findall(part)]


def is_secret_name(name: str) -> bool:
    """Whether a variable named `name` holds a credential by convention."""
    if name.upper() in _NOT_SECRET:
        return False
    parts = _words(name)
    if any(_SECRET_WORD.fullmatch(word) for word in parts):
        return True
    if not _LOCATOR_WORDS.isdisjoint(parts) and not _SERVICE_WORDS.isdisjoint(parts):
        return True
    return any(a in ("CONN", "CONNECTION") and b in ("STR", "STRING") for a, b in pairwise(parts))


def allowed_environment(environ: Mapping[str, str], extra: Iterable[str] = ()) -> dict[str, str]:
    """The part of `environ` a command may see: the allowlist, and the names in `extra`."""
    added = set(extra)
    return {
        name: value
        for name, value in environ.items()
        if name in PASSED or name.startswith(PASSED_PREFIXES) or name in added
    }


def secret_values(environ: Mapping[str, str]) -> list[str]:
    """What the log must never show: the value of every secret-named variable, and of any URL with a password.

    A URL's password counts alone too, since a command may print it apart. Values too short or plain
    to mask safely (see `maskable`) are left out.
    """
    found: list[str] = []
    for name, value in environ.items():
        if is_secret_name(name):
            found.append(value)
        for match in _URL_PASSWORD.finditer(value):
            found += [value, match["password"]]
    return [value for value in dict.fromkeys(found) if maskable(value)]


def maskable(value: str) -> bool:
    """Whether `value` is distinctive enough to mask everywhere it occurs without blanking ordinary text."""
    if len(value) >= MASK_PLAIN_MIN:
        return True
    kinds = {"lower" if c.islower() else "upper" if c.isupper() else "digit" if c.isdigit() else "other" for c in value}
    return len(value) >= MASK_MIN and len(kinds) >= 2
