"""The wire protocols, each on its official SDK's client: OpenAI Chat Completions (`openai_chat`),
OpenAI Responses (`openai_responses`), Anthropic Messages (`anthropic`), what each is (`protocols`), what they
share (`base`, `transport`, `failures`, `conversation`, `events`, `errors`), and what a self-hosted server says
of itself (`vllm`, `server_metrics`, `server_fixes`, `lanes`).

The bottom layer: it imports nothing of hotloop above it, and not the simulator (`sim/`).
"""
