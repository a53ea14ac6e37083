"""The simulator's defaults, for `hotloop sim serve`, the embedded simulator and the config alike.

Constants only, importing nothing: the config may read them (the one import of the simulator
the contracts allow it) without loading the simulator.
"""

from __future__ import annotations

from typing import Literal

CACHE_BLOCKS = 16_384  # the prefix cache's capacity, in 16-token blocks
MAX_MODEL_LEN = 131_072  # vLLM's --max-model-len: tokens a request may hold, prompt and answer
# Anthropic's minimum cacheable prompt for Sonnet-class models; shorter prefixes are not cached.
CACHE_MIN_TOKENS = 1024
Policy = Literal["fcfs", "priority"]  # vLLM's --scheduling-policy
POLICIES: tuple[Policy, ...] = ("fcfs", "priority")
# Not stock vLLM's fcfs, on purpose: hotloop's lanes send background requests at priority 10, which
# only a priority scheduler honours (`hotloop vllm recipe` recommends --scheduling-policy priority too).
SCHEDULING_POLICY: Policy = "priority"
PROMPT_TOKENS_DETAILS = True  # usage carries cached-token counts, as vLLM with --enable-prompt-tokens-details
# Continuous batching: each other request decoding at once adds this share to a request's per-token time
# (engine.py says why 2%: roughly vLLM with an 8B model on one GPU, where 32 at once take 1.6× a token's time).
BATCH_SLOWDOWN = 0.02
# The header a session's key travels in: hotloop sends it, and the fleet's affinity router reads it, as
# vLLM's production-stack router does with `--session-key`.
AFFINITY_HEADER = "x-session-id"
ROUTERS = ("round-robin", "affinity", "prefix")  # `hotloop sim serve --router`
