"""`hotloop whatif`: recorded traffic replayed through a model of the provider's cache and priced under every policy.

trace (a session log read as its conversation's requests, streamed), cache (the replay: what each request reads and
writes under a policy), policies (recorded, 1h, fixed pings, the adaptive keep-alive, the oracle), report (policies
priced, the model checked against what the log says the server did).
"""

from hotloop.sessions.whatif.report import Mismatch, PolicyTotal, check, compare, policy_names

__all__ = ["Mismatch", "PolicyTotal", "check", "compare", "policy_names"]
