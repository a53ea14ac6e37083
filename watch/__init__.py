"""`hotloop watch`: a measuring pass-through between any agent and its model server.

Requests and streams go through byte for byte as they arrive; hotloop reads a copy of each
with its providers' parsers, groups the requests into conversations, and turns each request
into a step of a session log, with the same events and figures as hotloop's own agent.

A frontend-free layer beside `core`: it may import config, sessions, agent and providers;
the frontends and the CLI import it. It never imports the simulator: the CLI starts one and
hands over its URL.
"""

from hotloop.watch.conversation import ConversationInfo, Sink
from hotloop.watch.proxy import HOSTED, Target, Upstream, Watch, upstream_at

__all__ = ["HOSTED", "ConversationInfo", "Sink", "Target", "Upstream", "Watch", "upstream_at"]
