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
