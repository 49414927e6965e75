"""What every layer shares, above the bindings: tokenizer.py (the model's tokenizer and file
tokenization), llama_log.py (llama.cpp's log routed to Python's), cache_files.py (the user's
cache folder and the atomic writer), safe_reads.py (the one opener of files the package does
not control), errors.py (the one-line user error), editor.py (the one
channel back to the editor), static_cache.py (a static cache file
opened for drafting, checked and verified)."""
