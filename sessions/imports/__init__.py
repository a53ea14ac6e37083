"""Other agents' session files (Claude Code's transcripts, Codex's rollouts) imported as hotloop session logs.

Each reader (`claude_code`, `codex`) turns an untrusted source file into `Imported` sessions: turns, one
step per API request with the provider's usage as a `UsageLedger`, tool calls with their results and the
durations the source's timestamps give. `writer` emits them as the agent's own events into a `SessionLog`
whose header names the `origin` (`import:claude-code/2.1.332`), under an id derived from the source's
session id, so a re-import replaces the earlier one. A line that can't be read is skipped and named.
"""
