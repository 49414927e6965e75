"""The workspace side of the daemon: which files of a folder are worth indexing (files.py, with
gitignore.py's .gitignore rules and rules.py's one decision per file), the workspace cache of
their n-grams (index.py, with indexed_files.py's bookkeeping and index_stats.py's reports) and
its saved index (store.py), the watcher that keeps it current (watcher.py, with folder_watches.py
and inotify.py on Linux, tree_observer.py elsewhere), and the folder object that owns them all
with its static cache and thread (folder.py)."""
