"""lookahead-lsp: local code completions from a GGUF model, drafted by n-gram lookup."""

__version__ = "0.1.0"
