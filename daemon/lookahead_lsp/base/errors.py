"""Errors the command line reports as one line, without a traceback."""

from __future__ import annotations


class UserError(Exception):
    """Something the user can fix; str(error) is a one-line message meant for them."""


class ModelNotFoundError(UserError):
    """No usable model file: none configured, or the configured path cannot be read."""
