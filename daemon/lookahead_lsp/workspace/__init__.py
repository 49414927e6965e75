"""The workspace side of the daemon: which files of a folder are worth indexing (files.py), the
index of their n-grams (index.py) and its saved copy (store.py), the watcher that keeps it
current (watcher.py, folder_watches.py, inotify.py), and the folder object that owns them all
with its static cache and thread (folder.py)."""
