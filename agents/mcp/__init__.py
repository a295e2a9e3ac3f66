"""MCP servers as tool sources (issue #26): the operator's own tools, under the same rules.

- ``config``: the ``.mcp.json`` file (MCP_SERVERS), read and checked at start-up;
- ``names``: how a server's tool is named for the model (``mcp__<server>__<tool>``, shortened);
- ``connection``: one server, its process or HTTP session, looked after (restarts with backoff);
- ``sandboxing``: how a stdio server's process is started, in the sandbox that holds bash;
- ``stdio``: a stdio server's transport, reading its messages in linear time with a byte bound;
- ``redaction``: a server's secrets (its env and header values) kept out of what is shown of it;
- ``progress``: a call's progress notifications, coalesced;
- ``results``: what a call returned, as the model reads it;
- ``tools``: a server's tools as the run's ``Tool``s;
- ``pool``: the servers of this process, started once and shared by its runs.
"""
