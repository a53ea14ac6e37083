"""`hotloop` with no command: the app, on the session its options ask for."""

from __future__ import annotations

import argparse

from hotloop.cli.session_options import session_options


def open_app(args: argparse.Namespace) -> int:
    """Open the TUI; a bad config, provider, tier or missing key fails here, before the screen takes over."""
    from hotloop.config import load_config
    from hotloop.headless.saved import say_saved
    from hotloop.tui.app import HotloopApp

    options = session_options(args, "app_")
    app = HotloopApp(load_config(), options)
    app.run()
    say_saved(app.session.logs.last, options.workspace)
    return 0
