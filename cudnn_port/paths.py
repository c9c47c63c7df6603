"""Paths that come from users, checkpoints and models: regular files only, safe names, containment, hashes."""
import hashlib
import os
import re
import stat
from typing import Dict

from .errors import CudnnPortError


class NotRegularFile(CudnnPortError, OSError):
    """A path that should be a regular file is a folder, pipe or device: bad input, and an OSError to code that
    treats an unreadable file as absent."""


def require_file(path, what="file") -> str:
    """``path`` if it is a regular file; a pipe or device would block a reader for ever, a folder would mislead it."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise CudnnPortError(f"{what} not found: {path}; check the path") from None
    except OSError as e:
        raise CudnnPortError(f"cannot open {path}: {e.strerror}; check the path and its permissions") from None
    if not stat.S_ISREG(mode):
        raise NotRegularFile(f"{path} is not a regular file (a folder, pipe or device); pass the {what} itself")
    return path


def safe_component(name: str) -> str:
    """``name`` (a layer or variable name) as ONE harmless path component: letters, digits, ``.``, ``_``, ``-``;
    no separator, no leading dot (so never ``..``), never empty.

    >>> [safe_component(n) for n in ("encoder", "../..", "a/b", ".hidden", "")]
    ['encoder', '_', 'a_b', 'hidden', '_']
    """
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", str(name)).lstrip(".")
    return cleaned if cleaned.strip("._") else "_"


def unique_components(names) -> Dict[str, str]:
    """{name: safe_component(name)} with a numeric suffix wherever two names would land on the same component."""
    out, taken = {}, set()
    for name in names:
        base = candidate = safe_component(name)
        n = 1
        while candidate in taken:
            n += 1
            candidate = f"{base}_{n}"
        taken.add(candidate)
        out[name] = candidate
    return out


def is_within(path, folder) -> bool:
    """Whether ``path`` is ``folder`` or lies below it (symbolic links resolved)."""
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def sha256(path, chunk=1 << 22) -> str:
    """The file's sha256 (hex). A pipe or device is refused, not read: opened without blocking, checked, then read."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFile(f"{path} is not a regular file (a folder, pipe or device); pass the file itself")
        h = hashlib.sha256()
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()
