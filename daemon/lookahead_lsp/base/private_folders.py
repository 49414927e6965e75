"""Folders only this user may enter (the runtime folder, a download's partial files), made and
opened relative to a held descriptor and checked on the descriptor they were opened as: a link
at the name is never followed, so no rename above or at the name redirects what is made in it."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from lookahead_lsp.base.errors import UserError

FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def open_private_subfolder(parent_fd: int, path: Path) -> int:
    """A descriptor of the folder path.name in the open folder parent_fd (path names it in
    messages), created with mode 0700 where missing. UserError, one line, for a link, a file,
    or a folder another user owns or may enter."""
    try:
        os.mkdir(path.name, 0o700, dir_fd=parent_fd)
    except FileExistsError:
        pass
    except OSError as error:
        raise UserError(f"cannot create {path}: {error.strerror or error}") from None
    try:
        fd = os.open(path.name, FOLDER_FLAGS | os.O_NOFOLLOW, dir_fd=parent_fd)
    except OSError as error:
        raise UserError(f"{path} {unopenable(error, path.name, parent_fd)}") from None
    status = os.fstat(fd)
    if status.st_uid != os.getuid() or status.st_mode & 0o077:
        os.close(fd)
        raise UserError(
            f"{path} is not a private folder of this user (owner uid {status.st_uid}, "
            f"mode {stat.S_IMODE(status.st_mode):o})"
        )
    return fd


def unopenable(error: OSError, name: str, parent_fd: int | None = None) -> str:
    """Why the folder name (of parent_fd), opened without following a link, could not be."""
    if error.errno not in (errno.ELOOP, errno.ENOTDIR):  # Linux says ENOTDIR for a link too
        return f"cannot be opened: {error.strerror or error}"
    try:
        link = stat.S_ISLNK(os.stat(name, dir_fd=parent_fd, follow_symlinks=False).st_mode)
    except OSError:
        link = False
    return "is a symbolic link, which is not followed" if link else "is not a folder"
