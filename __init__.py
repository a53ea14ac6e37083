"""hotloop: a terminal agent console that shows where every turn's time and tokens go."""

__version__ = "0.1.0"


class InputError(Exception):
    """Input the user can fix (the command line, the config, a session they named): one line, exit status 2."""
