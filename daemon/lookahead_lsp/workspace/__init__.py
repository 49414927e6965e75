"""Workspace scanning: which files of a repository or folder are worth indexing."""
