"""One secret-name rule: which variables hold credentials, which values the log masks, and the log masking them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hotloop.agent.tools.mcp_import import imported, to_toml
from hotloop.cli import main
from hotloop.secret_policy import allowed_environment, is_locale, is_secret_name, maskable, secret_values

SECRET = [
    # what each of the two old rules caught, and more
    "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "API_KEY", "apiKey", "openaiApiKey", "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY", "SECRET_KEY", "DJANGO_SECRET", "CLIENT_SECRETS", "STRIPE_APIKEY", "SSH_PRIVATE_KEY",
    "GITHUB_TOKEN", "githubToken", "HF_TOKEN", "NPM_AUTHTOKEN", "AWS_SESSION_TOKEN", "REFRESH_TOKENS",
    "DB_PASSWORD", "PGPASSWORD", "MYSQL_PWD", "SMTP_PASS", "KEY_PASSPHRASE", "TWINE_PASSWD",
    "NPM_AUTH", "OAUTH_CLIENT", "OAuth2Token", "BASICAUTH", "AUTHORIZATION", "X_AUTHORIZATION_HEADER",
    "DB_CREDENTIALS", "GOOGLE_APPLICATION_CREDENTIALS", "DOCKER_CREDS", "SESSION_COOKIE", "COOKIEJAR",
    "GITHUB_PAT", "PAT", "AZURE_DEVOPS_PAT_VALUE", "CI_JOB_JWT", "BEARER", "SLACK_WEBHOOK_URL",
    # a DSN, a connection string, a database's or a broker's URL
    "SENTRY_DSN", "DATABASE_URL", "SQLALCHEMY_DATABASE_URI", "REDIS_URL", "MONGODB_URI", "CELERY_BROKER_URL",
    "PG_URL", "AZURE_STORAGE_CONNECTION_STRING", "DB_CONN_STR",
]  # fmt: skip
HARMLESS = [
    "KEYBOARD", "KEYMAP", "XKB_KEYMAP", "MONKEY_PATCH", "LESSKEY", "PATH", "PWD", "OLDPWD", "HOME", "LANG",
    "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "AUTHORITY", "TOKENIZERS_PARALLELISM", "SSH_ASKPASS", "PASSENGER_APP_ENV",
    "PATTERN", "PATCH_LEVEL", "DB_HOST", "DB_NAME", "DATABASE_NAME", "PUBLIC_URL", "API_URL", "KEYCLOAK_REALM",
    "COMPOSE_PROJECT_NAME", "TERM", "SHELL", "VIRTUAL_ENV", "SECTION", "PYTHONPATH",
]  # fmt: skip


@pytest.mark.parametrize("name", SECRET)
def test_a_credential_by_any_usual_name_is_secret(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", HARMLESS)
def test_a_harmless_name_is_not(name: str) -> None:
    assert not is_secret_name(name)


@pytest.mark.parametrize(
    ("value", "masked"),
    [
        ("1", False),
        ("true", False),
        ("us", False),
        ("us-east-1", True),  # 9 characters of two kinds: too rare in prose to matter
        ("postgres", False),  # a common word, as plain as they come
        ("changeme", False),
        ("12345678", False),
        ("hunter2x", True),
        ("EMPTY", False),  # what local servers take for a key
        ("correcthorsebatterystaple", True),  # long enough whatever it is made of
        ("ghp_0123456789abcdef", True),
    ],
)
def test_only_a_value_distinctive_enough_is_masked(value: str, masked: bool) -> None:
    assert maskable(value) is masked


def test_the_environment_s_secrets_are_the_secret_named_values_and_urls_passwords() -> None:
    environ = {
        "GITHUB_PAT": "github-pat-0123456789",
        "FEATURE_TOKEN": "1",  # secret-named, but masking "1" everywhere would wreck the log
        "UPSTREAM": "https://deploy:s3cr3t-pass@git.example.com/repo.git",
        "HOMEPAGE": "https://user@example.com/",  # no password
        "EDITOR": "vim",
    }
    assert secret_values(environ) == [
        "github-pat-0123456789",
        "https://deploy:s3cr3t-pass@git.example.com/repo.git",
        "s3cr3t-pass",
    ]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("LANG", "en_US.UTF-8"), ("LC_ALL", "C"), ("LC_ALL", "C.UTF-8"), ("LC_CTYPE", "UTF-8"), ("LC_TIME", "POSIX"),
        ("LC_MESSAGES", "sr_RS.UTF-8@latin"), ("LC_NUMERIC", "de_DE@euro"), ("LC_MONETARY", "es_419.utf8"),
        ("LC_PAPER", "ast_ES.ISO-8859-15"), ("LANGUAGE", "en_US:en"), ("LC_ALL", ""),
    ],
)  # fmt: skip
def test_a_locale_setting_passes(name: str, value: str) -> None:
    assert is_locale(name, value) and allowed_environment({name: value}) == {name: value}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("LC_DEPLOY", "production"),  # no variable the C library reads: data under the prefix ssh passes
        ("LC_TERMINAL", "iTerm2"),
        ("LC_CTYPE", "ghp_0123456789abcdefABCD"),  # a locale variable, a value no locale has
        ("LANG", "$(touch pwned)"),
        ("LANGUAGE", "en_US:sk-0123456789abcdef"),
        ("LC_ALL", "en_US.UTF-8 extra"),
    ],
)
def test_anything_posing_as_the_locale_does_not(name: str, value: str) -> None:
    assert not is_locale(name, value) and allowed_environment({name: value}) == {}
    assert allowed_environment({name: value}, [name]) == {name: value}  # unless the user names it


def test_a_value_posing_as_the_locale_is_masked() -> None:
    environ = {
        "LC_DEPLOY": "deploy-key-0123456789abcdef",
        "LC_CTYPE": "ghp_0123456789abcdefABCD",
        "LC_TERMINAL": "iTerm2",  # not distinctive enough to mask everywhere
        "LC_ALL": "en_US.UTF-8",  # a locale: never masked, though long and mixed
    }
    assert secret_values(environ) == ["deploy-key-0123456789abcdef", "ghp_0123456789abcdefABCD"]


def test_mcp_import_keeps_back_what_the_rule_calls_secret(tmp_path: Path) -> None:
    env = {"GITHUB_PAT": "ghp-literal", "DATABASE_URL": "postgres://a:b@c/d", "KEYBOARD_LAYOUT": "us", "LOG": "warn"}
    source = tmp_path / ".mcp.json"
    source.write_text(json.dumps({"mcpServers": {"db": {"command": "db-mcp", "env": env}}}))
    result = imported(source)
    assert result.servers[0].env == {"KEYBOARD_LAYOUT": "us", "LOG": "warn"}
    assert [note.split(":")[0] for note in result.notes] == ["[mcp.db] needs GITHUB_PAT", "[mcp.db] needs DATABASE_URL"]
    # The values are the user's to export; their names are passed to the server, which sees no other of them.
    assert result.servers[0].pass_env == ("GITHUB_PAT", "DATABASE_URL")
    assert 'pass_env = ["GITHUB_PAT", "DATABASE_URL"]' in to_toml(result)


def test_the_log_and_its_exports_mask_every_secret_the_environment_holds(
    isolated_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (isolated_home / "config.toml").write_text(
        "[routing]\ntitles = false\n[sim]\nttft_ms = 0\nprefill_us_per_token = 0\ndecode_ms_per_token = 0\n"
    )
    monkeypatch.chdir(isolated_home)
    secrets = {
        "GITHUB_PAT": "github-pat-0123456789",
        "NPM_AUTH": "npm-auth-0123456789",
        "DB_CREDENTIALS": "db-creds-0123456789",
        "UPSTREAM_MIRROR": "https://deploy:s3cr3t-pass@git.example.com/repo.git",
        "LC_DEPLOY": "deploy-key-0123456789abcdef",  # under the locale's name, no locale
    }
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("FEATURE_TOKEN", "true")
    prompt = f"{' '.join(secrets.values())} and the password s3cr3t-pass alone; true, 1 and us stay"
    assert main(["run", prompt]) == 0
    [log] = (isolated_home / "data" / "sessions").glob("*.jsonl")
    exported = isolated_home / "export.md"
    assert main(["sessions", "export", log.stem.rsplit("_", 1)[1], "--format", "md", "-o", str(exported)]) == 0
    for text in (log.read_text(), exported.read_text()):
        assert not [value for value in [*secrets.values(), "s3cr3t-pass"] if value in text]
        assert "[redacted] and the password [redacted] alone; true, 1 and us stay" in text
