"""What the tests and the benchmarks share: daemon.py (an editor's side of the LSP: requests,
status, waiting until ready, and a client that starts and stops `lookahead-lsp serve`),
lsp_peer.py (a raw JSON-RPC peer for framing and transport tests), engines.py (an Engine on a
model, as the tests build it), recording_client.py (an Editor that records what the user would
see), tiny_gguf.py (a small random-weight GGUF with FIM tokens), hf_server.py (a local server
speaking the Hub's download protocol), folders.py (workspace folders made on disk), caches.py
and reference_lookup.py (n-gram caches and a pure-Python reference of the lookup semantics).

The tests find it on pytest's path (pyproject's pythonpath); a benchmark puts tests/ on sys.path
first (bench/support_path.py)."""
