"""One timeout type: the config's `request_timeout` table and `--timeout` each give the `RequestTimeout` that the
provider times its requests by, not a settings struct or a pair of floats converted on the way."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from hotloop.cli.session_options import add_session_options, session_options
from hotloop.config import Choice, ConfigError, resolve
from hotloop.config.loader import load_config
from hotloop.core.runtime import Runtime
from hotloop.providers.transport import RequestTimeout, SdkProvider


def written(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    return path


async def test_the_config_and_the_command_line_hand_the_provider_the_same_timeout_type(tmp_path: Path) -> None:
    """The table, `--timeout 120,30` and the provider built from them all hold one `RequestTimeout`."""
    config = load_config(written(tmp_path, "[providers.sim.request_timeout]\nfirst_byte = 5\n"))
    assert config.providers["sim"].request_timeout == RequestTimeout(first_byte=5, idle=60)
    parser = argparse.ArgumentParser()
    add_session_options(parser, "")
    options = session_options(parser.parse_args(["--timeout", "120,30"]), "")
    assert options.timeout == RequestTimeout(first_byte=120, idle=30)
    runtime = Runtime(config.with_timeout(options.timeout))
    try:
        provider = await runtime.connect(resolve(runtime.config, Choice(provider="sim")))
        assert isinstance(provider, SdkProvider)
        assert provider.timeout == RequestTimeout(first_byte=120, idle=30)
    finally:
        await runtime.aclose()


@pytest.mark.parametrize("line", ["first_byte = 0", "idle = -1"])
def test_a_timeout_that_is_not_positive_is_refused_in_one_line(tmp_path: Path, line: str) -> None:
    """The limit travels with the type: the config names the setting and says it must be positive."""
    with pytest.raises(ConfigError) as refused:
        load_config(written(tmp_path, f"[providers.sim.request_timeout]\n{line}\n"))
    setting = line.split(" ")[0]
    assert str(refused.value).endswith(f"providers.sim.request_timeout.{setting} must be positive")
