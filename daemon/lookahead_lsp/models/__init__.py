"""GGUF models: resolve.py (which file a setting or name means), catalogue.py (the known-good
code models), info.py (what a file holds: architecture, context, vocabulary, FIM tokens),
pull.py (downloads from the Hugging Face Hub, checked and capped), gguf_header.py (a total
reader of the file's header)."""
