"""hotloop: a terminal agent console that shows where every turn's time and tokens go."""

__version__ = "0.1.0"
