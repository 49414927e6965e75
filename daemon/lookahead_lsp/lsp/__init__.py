"""The Language Server Protocol side: server.py (thin handlers, one per request or notification,
each delegating to the service), items.py (the LSP items built from a suggestion, pure),
rpc.py (the JSON-RPC protocol class: bounded frames, errors for bad params), framing.py
(Content-Length framing), transport.py (stdio, a same-user socket, TCP with a token). Knows
the service, never the engine or the workspace directly."""
