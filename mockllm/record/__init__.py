"""Record mode: a proxy to a real upstream that writes what it saw as a dsh session tree.

The tree's shape, when the agent sends no lineage headers (`lineage` holds the rule in full and
applies it when the recording stops; `x-mockllm-parent` / `x-mockllm-fork` always win):
- a session whose first call arrived while another session waited on a tool call (that one's last
  answer called tools, its next request not yet sent), and whose last answer that next request
  brings back in a tool result for one of those calls, is that session's child (the nearest such
  waiter, when an answer is quoted on up a chain);
- the primary is the root with the most descendants, never a one-off call (one call, no tools
  offered: a title call) when there is a conversation; every other root hangs from the primary;
- children are numbered, and `createdAt` strictly increases, in the order first calls arrived.
It cannot tell a child whose answer its parent never sends back (or sends rewritten), one with no
answer (it failed or was cancelled), one started by something other than a tool call (a graph
fan-out), or a fork sent without `x-mockllm-fork`: those hang from the primary, as spawns.
`--side-route MODEL` keeps a model's calls out of the tree (`side`); `--cwd DIR` writes `{{cwd}}`.
"""
