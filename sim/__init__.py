"""The embedded simulator: a deterministic, paced, vLLM-like server speaking OpenAI Chat Completions,
OpenAI Responses and Anthropic Messages.

A package of its own: it imports nothing of hotloop but the version. Of the product, only
`core/runtime.py` (which starts it) and the CLI (`hotloop sim serve`) import it, and the config
reads its constants (`defaults`); tests and benchmarks use it freely.
"""
