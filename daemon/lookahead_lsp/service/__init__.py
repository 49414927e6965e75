"""What the daemon does for its editors, with no LSP in it: service.py (the model, its worker
and the request lifecycle), scheduler.py (one request at a time, the newest per document, and
the suggestion cache), documents.py (the open documents), folders.py (the workspace folders and
which one a document belongs to), status.py (lookahead/status), unopened.py (files of a folder
the editor did not open), settings.py (the settings schema, validated once). Uses the engine,
the workspace and the models; neither knows it."""
