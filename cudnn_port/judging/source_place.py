"""Where verify finds the source a conversion read, so that the original judges and not the conversion itself.

The manifest records the source's path and the sha256 of each of its files. When that path no longer holds those
files, verify looks for them again: in the place the user names (``verify --source PATH``), else next to OUT (the
folders beside it, three levels down), and takes the first place whose files all hash as recorded.

    found = locate(manifest, out, named=None)   # None: as recorded, or not found; else a row saying where
"""
import glob
import os
from typing import TYPE_CHECKING, Any, Dict, Iterator, Optional

from ..errors import CudnnPortError
from ..paths import sha256

if TYPE_CHECKING:
    from ..manifest import Manifest

DEPTH = 3  # how far below OUT's parent folder a moved source is looked for
MAX_FOLDERS = 2000  # and in at most so many folders: a search, not a crawl of the disk


def _base_and_path(where: str, files: Dict[str, str], recorded: str):
    """(the folder the recorded file names are relative to, the source path to read) for a source at ``where``: a
    folder source (a SavedModel) is the folder; a file or a checkpoint prefix is ``where`` itself, its files
    beside it."""
    leaf = os.path.basename(os.path.normpath(recorded))
    if files and all(name.startswith(leaf) for name in files):  # model.ckpt.index, model.h5: a file or a prefix
        return os.path.dirname(where), where
    return where, where


def matches(base: str, files: Dict[str, str]) -> bool:
    """Whether every recorded file lies under ``base`` with its recorded sha256."""
    try:
        return bool(files) and all(os.path.isfile(os.path.join(base, n)) and sha256(os.path.join(base, n)) == d
                                   for n, d in files.items())
    except OSError:
        return False


def _candidates(out: str, recorded: str, files: Dict[str, str]) -> Iterator[str]:
    """Folders near OUT that hold every recorded file name (hashes not yet checked), nearest first."""
    root, out = os.path.dirname(os.path.abspath(out)), os.path.abspath(out)
    first = sorted(files)[0]
    seen = 0
    for folder, dirs, _ in os.walk(root):
        depth = os.path.relpath(folder, root).count(os.sep) + (folder != root)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and os.path.join(folder, d) != out
                         and not os.path.islink(os.path.join(folder, d)))
        if depth >= DEPTH:
            dirs[:] = []
        seen += 1
        if seen > MAX_FOLDERS:
            return
        if os.path.isfile(os.path.join(folder, first)):
            yield folder


def locate(manifest: "Manifest", out: str, named: Optional[str] = None) -> Optional[Dict[str, Any]]:
    """Point ``manifest``'s source (in memory, not on disk) at where its files are now, and return a report row
    saying so; None where the recorded path still holds them, or where they are found nowhere (verify's judges then
    say what they could not judge). ``named`` (``verify --source PATH``) must hold the files as recorded: else a
    :class:`~cudnn_port.errors.CudnnPortError` names the file that differs."""
    recorded, files = manifest.source.checkpoint, dict(manifest.source.files)
    if named is not None:
        named = os.path.abspath(os.fspath(named))
        if not (os.path.exists(named) or glob.glob(glob.escape(named) + ".*")):
            raise CudnnPortError(f"--source {named}: no such file or folder; name the source OUT was converted from")
        base, path = _base_and_path(named, files, recorded)
        differ = sorted(n for n in files if not matches(base, {n: files[n]}))
        if differ:
            raise CudnnPortError(f"--source {named}: {differ[0]} is missing or differs from the conversion's record "
                                 f"(sha256 in OUT/manifest.json); name the source OUT was converted from")
        return _moved(manifest, recorded, path, "named by --source")
    base, _ = _base_and_path(recorded, files, recorded)
    if not files or matches(base, files):
        return None
    leaf = os.path.basename(os.path.normpath(recorded))
    folder_source = _base_and_path(recorded, files, recorded)[0] == recorded
    for folder in _candidates(out, recorded, files):
        if matches(folder, files):
            path = folder if folder_source else os.path.join(folder, leaf)
            return _moved(manifest, recorded, path, "found next to OUT by its sha256")
    return None


def _moved(manifest, recorded, path, how):
    manifest.source.checkpoint = path
    return {"artifact": "source (sha256)", "stack": "(all)", "max_abs": None, "max_rel": None, "passed": True,
            "judge": "manifest.json",
            "note": f"{how}: {path} (the conversion read {recorded}); every file hashes as recorded"}
