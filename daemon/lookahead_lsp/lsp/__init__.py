"""The Language Server Protocol side: server.py (thin handlers, one per request or notification,
each delegating to the service), items.py (the LSP items built from a suggestion, pure),
rpc.py (the JSON-RPC protocol class: bounded frames, errors for bad params), framing.py
(Content-Length framing), listeners.py (where the daemon listens: a same-user Unix socket, TCP
with a token file), transport.py (serving stdio or a socket's clients, a session each),
tcp_peers.py (who owns a local TCP peer), relay.py (`serve` over stdio relayed to the user's
shared daemon). Knows the service, never the engine or the workspace directly."""
