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

The locale passes by name and by value: the variables the C library reads, each only with a
value shaped like a locale name. Any other `LC_` variable is data under the locale's name (ssh's
usual `AcceptEnv LANG LC_*` carries it from another machine, which is why it gets used so): it
never passes, and its value is masked like a secret's.
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
    {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "TZ", "TMPDIR",
     "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "CONDA_EXE", "JAVA_HOME", "GOPATH", "GOROOT",
     "CARGO_HOME", "RUSTUP_HOME", "NVM_DIR", "NVM_BIN", "PYENV_ROOT", "RBENV_ROOT", "GEM_HOME", "GEM_PATH",
     "PNPM_HOME", "VOLTA_HOME", "BUN_INSTALL", "ASDF_DIR", "ASDF_DATA_DIR", "SDKMAN_DIR",
     "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"}
)  # fmt: skip
# The locale variables glibc reads (LANGUAGE: gettext's list of them, `en_US:en`). A value passes if it reads
# as a locale's name: `C`, `POSIX`, `en_US.UTF-8`, `sr_RS.UTF-8@latin`, `es_419`, macOS's bare `UTF-8`.
LOCALE = frozenset(
    {"LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_COLLATE", "LC_MESSAGES", "LC_MONETARY", "LC_NUMERIC", "LC_TIME",
     "LC_ADDRESS", "LC_IDENTIFICATION", "LC_MEASUREMENT", "LC_NAME", "LC_PAPER", "LC_TELEPHONE"}
)  # fmt: skip
_LOCALE_NAME = re.compile(
    r"(?:C|POSIX|[a-z]{2,3}(?:_(?:[A-Z]{2}|[0-9]{3}))?)(?:\.[A-Za-z0-9][A-Za-z0-9_-]{0,15})?(?:@[A-Za-z0-9_-]{1,16})?"
    r"|(?i:UTF-?8)"
)
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


def is_locale(name: str, value: str) -> bool:
    """Whether `name=value` is a locale setting: a variable the C library reads, set to a locale's name (or empty)."""
    if name not in LOCALE:
        return False
    names = value.split(":") if name == "LANGUAGE" else [value]
    return not value or all(_LOCALE_NAME.fullmatch(part) for part in names)


def _posing_as_locale(name: str, value: str) -> bool:
    return (name.startswith("LC_") or name in LOCALE) and not is_locale(name, value)


def allowed_environment(environ: Mapping[str, str], extra: Iterable[str] = ()) -> dict[str, str]:
    """The part of `environ` a command may see: the allowlist, the locale, and the names in `extra`."""
    added = set(extra)
    return {name: value for name, value in environ.items() if name in PASSED or name in added or is_locale(name, value)}


def secret_values(environ: Mapping[str, str]) -> list[str]:
    """What the log must never show: the value of every secret-named variable, and of any URL with a password.

    A URL's password counts alone too, since a command may print it apart; so does the value of a
    variable named like the locale that is no locale setting (`LC_DEPLOY`, `LC_CTYPE=ghp_…`). Values
    too short or plain to mask safely (see `maskable`) are left out.
    """
    found: list[str] = []
    for name, value in environ.items():
        if is_secret_name(name) or _posing_as_locale(name, value):
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
