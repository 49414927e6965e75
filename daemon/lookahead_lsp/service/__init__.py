"""What the daemon does for its editors, with no LSP in it: service.py (one session: its model,
requests and work done ahead), model_host.py (the daemon's models, shared by sessions whose
model settings are equal), scheduler.py (one request at a time, the newest per document, and
the suggestion cache), documents.py (the open documents), folders.py (the workspace folders and
which one a document belongs to), status.py (lookahead/status and its counters), unopened.py (files of a folder
the editor did not open), settings.py (the settings schema, validated once). Uses the engine,
the workspace and the models; neither knows it."""
