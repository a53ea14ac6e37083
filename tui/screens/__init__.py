"""The app's screens: the main view (`main`, with `main.tcss`), help, a saved session, a replay, the
waterfall."""
