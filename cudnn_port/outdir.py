"""The output folder: the one module that decides where a run writes, and how OUT comes into being.

What it guarantees (README, "Safety"):

- OUT appears whole or not at all. Everything is written into a hidden sibling ``.OUT.tmp-XXXXXXXX`` and
  published by one rename; an earlier output that ``force`` replaces is moved aside and removed in the same step.
  SIGINT and SIGTERM are held back while that step runs, a signal received earlier is checked for just before it,
  and an interrupted or failed build removes its sibling (:mod:`cudnn_port.signals`), so neither OUT half-written
  nor a hidden temporary folder is ever left.
- OUT is never a symbolic link, a file, or a non-empty folder other than an earlier cudnn-port output; ``force``
  replaces only such an output, exactly as it was written (:mod:`cudnn_port.out_guard`).
- No source lies inside OUT and OUT never lies inside a source folder, so ``force`` can never delete an input.
- Problems with OUT itself (a parent that is a file, no permission, a read-only disk) are bad input: one
  :class:`~cudnn_port.errors.CudnnPortError` line, nothing written.

Every output carries ``manifest.json`` (:mod:`cudnn_port.manifest`, written by :func:`finish`): the tool and its
version, the source and its files' sha256, and the sha256 of every other file of OUT.
"""
import errno
import os
import uuid
from typing import Callable, Optional

from .errors import CudnnPortError
from .manifest import MANIFEST, Manifest, save_manifest
from .out_guard import check_replaceable
from .paths import is_within, sha256
from .progress import say_to
from .signals import check, forget, mark_published, remove_on_exit, remove_tree, signals_held

USER_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENOTDIR, errno.ELOOP,
               errno.ENAMETOOLONG, errno.EEXIST, errno.EISDIR}
DISK_ERRNOS = {errno.ENOSPC: "is full", errno.EDQUOT: "has no quota left for you", errno.EROFS: "is read-only",
               errno.EFBIG: "refused a file over the file size limit (ulimit -f)"}


def mount_point(path: str) -> str:
    """The mount point of the disk ``path`` is (or would be) on."""
    path = os.path.abspath(path)
    while not os.path.lexists(path) or (not os.path.ismount(path) and os.path.dirname(path) != path):
        path = os.path.dirname(path)
    return path


def disk_error(error: BaseException, path: str) -> Optional[CudnnPortError]:
    """A full, read-only or over-quota disk (an OSError, or a library's error that quotes the system's words, such as
    TensorFlow's "No space left on device") met while writing under ``path``, as one CudnnPortError line naming the
    disk; None for any other error."""
    found = error.errno if isinstance(error, OSError) and error.errno in DISK_ERRNOS else None
    text = str(getattr(error, "message", None) or error)
    found = found or next((n for n in DISK_ERRNOS if os.strerror(n) in text), None)
    if found is None:
        return None
    return CudnnPortError(f"cannot write {path}: the disk mounted at {mount_point(path)} {DISK_ERRNOS[found]} "
                          f"({os.strerror(found)}); make room there, or choose an output folder on another disk")


def _user_error(error, what, path):
    """An OSError about OUT as one CudnnPortError line, or None if it is not the user's to fix."""
    disk = disk_error(error, path)
    if disk is not None:
        return disk
    if not isinstance(error, OSError) or error.errno not in USER_ERRNOS:
        return None
    return CudnnPortError(f"cannot {what}: {error.strerror} ({getattr(error, 'filename', '') or ''}); choose an "
                          "output folder on a writable disk where you have write permission")


class OutputFolder:
    """Where a run writes. ``sources``: the files and folders the run reads (checked never to be inside OUT, and
    OUT never inside them). Construct it before reading anything heavy: it refuses a bad OUT up front."""

    def __init__(self, out, *, force=False, sources=()):
        self.out = out = os.path.abspath(os.fspath(out))
        if os.path.islink(out):
            raise CudnnPortError(f"{out} is a symbolic link; pass the real folder path (cudnn-port never writes "
                                 "through links)")
        for source in sources:
            source = os.path.abspath(os.fspath(source))
            if is_within(source, out):
                raise CudnnPortError(f"the source {source} lies inside OUT {out}, which would be replaced; "
                                     "choose an output folder outside the source")
            if os.path.isdir(source) and is_within(out, source):
                raise CudnnPortError(f"OUT {out} lies inside the source folder {source}; choose an output folder "
                                     "outside it (cudnn-port never writes into its input)")
        parent = os.path.dirname(out)
        if os.path.lexists(out):
            if not os.path.isdir(out):
                raise CudnnPortError(f"{out} exists and is a file, not a folder; choose a folder name for the output")
            try:
                entries = os.listdir(out)
            except OSError as e:
                raise _user_error(e, f"read {out}", out) or e from None
            if entries and not force:
                raise CudnnPortError(f"{out} exists and is not empty; choose a new folder, or pass --force to "
                                     "replace an earlier cudnn-port output")
            if entries:
                check_replaceable(out)
        ancestor = parent
        while not os.path.lexists(ancestor):
            ancestor = os.path.dirname(ancestor)
        if not os.path.isdir(ancestor):
            raise CudnnPortError(f"{ancestor} is a file, so {out} cannot be created; choose another output folder")
        if not os.access(ancestor, os.W_OK | os.X_OK):
            raise CudnnPortError(f"cannot write in {ancestor} (permission denied); choose an output folder where "
                                 "you have write permission")

    def build(self, write: Callable[[str], Manifest], say: Optional[Callable[[str], None]] = None) -> Manifest:
        """Run ``write(tmp)`` (returns the manifest) in a hidden sibling of OUT, then publish it as OUT. A signal
        received at any point before publishing (even one whose exception a library swallowed) leaves nothing."""
        out, say = self.out, say_to(say)
        parent = os.path.dirname(out)
        tmp = os.path.join(parent, f".{os.path.basename(out)}.tmp-{uuid.uuid4().hex[:8]}")
        made = False
        try:
            with signals_held(deliver=False):  # a signal during mkdir is raised by check(), inside this try
                os.makedirs(parent, exist_ok=True)
                remove_on_exit(tmp)
                os.mkdir(tmp)
                made = True
            check()
            manifest = write(tmp)
            with signals_held(published=True):
                check()
                self._publish(tmp)
                mark_published()
        except BaseException as e:
            with signals_held(deliver=False):
                remove_tree(tmp)
                forget(tmp)
            problem = _user_error(e, f"{'write' if made else 'create'} {out}", out)
            if problem:
                raise problem from None
            raise
        forget(tmp)
        say(f"wrote {out}")
        return manifest

    def _publish(self, tmp):
        out, old = self.out, None
        if os.path.lexists(out):
            if os.listdir(out):
                old = os.path.join(os.path.dirname(out), f".{os.path.basename(out)}.old-{uuid.uuid4().hex[:8]}")
                os.rename(out, old)
            else:
                os.rmdir(out)
        try:
            os.rename(tmp, out)
        except BaseException:
            if old:
                os.rename(old, out)  # put the earlier output back
            raise
        if old:
            remove_on_exit(old)
            remove_tree(old)
            forget(old)


def finish(manifest: "Manifest", tmp: str) -> "Manifest":
    """Hash every file of the output (all but the manifest itself) into ``manifest`` and write it."""
    hashes = {}
    for root, dirs, files in os.walk(tmp):
        dirs.sort()
        for f in sorted(files):
            rel = os.path.relpath(os.path.join(root, f), tmp)
            if rel != MANIFEST:
                hashes[rel] = sha256(os.path.join(root, f))
    return save_manifest(manifest, tmp, hashes)
