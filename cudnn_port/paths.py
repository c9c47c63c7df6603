"""Paths that come from users, checkpoints and models: regular files only, safe names, containment, hashes, links;
writing without following links."""
import contextlib
import hashlib
import os
import re
import stat
from typing import Dict, Iterable, Optional, Union

from .errors import CudnnPortError
from .signals import forget, remove_on_exit


class NotRegularFile(CudnnPortError, OSError):
    """A path that should be a regular file is a folder, pipe or device: bad input, and an OSError to code that
    treats an unreadable file as absent."""


def is_saved_model(path: str) -> bool:
    """Whether ``path`` is a SavedModel folder (it holds saved_model.pb)."""
    return os.path.isdir(path) and os.path.lexists(os.path.join(path, "saved_model.pb"))


def require_file(path: str, what: str = "file") -> str:
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


def unique_components(names: Iterable[str]) -> Dict[str, str]:
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


def is_within(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` or lies below it (symbolic links resolved)."""
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def sha256(path: str, chunk: int = 1 << 22) -> str:
    """The file's sha256 (hex). A pipe or device is refused, not read: opened without blocking, checked, then read."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFile(f"{path} is not a regular file (a folder, pipe or device); pass the file itself")
        h = hashlib.sha256()
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def refuse_links_out(folder: str, what: str, files: Optional[Iterable[str]] = None) -> None:
    """Refuse a symbolic link in ``folder`` (every entry below it, or only ``files``) that leads outside it, or to a
    folder anywhere: a model's files are read, hashed and copied from SOURCE only, and a linked tree is never
    copied. The message says how to pass the real files instead."""
    folder = os.path.abspath(os.fspath(folder))
    for path in (_entries(folder) if files is None else files):
        if not os.path.islink(path):
            continue
        target = os.path.realpath(path)
        if os.path.isdir(target):
            raise CudnnPortError(f"{path} in the {what} folder is a symbolic link to the folder {target}; "
                                 "cudnn-port never copies a linked tree: copy the files in (cp -rL) and pass that")
        if not is_within(target, folder):
            raise CudnnPortError(f"{path} in the {what} folder is a symbolic link to {target}, outside {folder}; "
                                 "copy the real file into the folder (cp -L) and pass that folder")


def _entries(folder):
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            yield os.path.join(root, name)


def write_new(path: str, data: Union[str, bytes]) -> None:
    """Write ``data`` (str or bytes) as ``path`` without following any link: into a new file of a random name
    beside it (exclusive create, no link followed), then renamed over ``path`` (a link there is replaced, never
    written through)."""
    data = data.encode() if isinstance(data, str) else data
    tmp = os.path.join(os.path.dirname(path) or ".", f".{os.path.basename(path)}.{os.urandom(4).hex()}.tmp")
    created = False
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        created = True
        remove_on_exit(tmp)
        with open(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if created:  # never a file that was there before (exclusive create failed on it)
            with contextlib.suppress(OSError):
                os.remove(tmp)
        raise
    finally:
        forget(tmp)
