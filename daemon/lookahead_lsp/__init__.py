"""lookahead-lsp: local code completions from a GGUF model, drafted by n-gram lookup."""

# llama.cpp's libraries load before anything else of ours (our native extension, the modules
# that import numpy), whichever of our modules a program imports first: llama_log says why.
from lookahead_lsp.base import llama_log as _llama_log  # noqa: F401

__version__ = "0.1.0"
