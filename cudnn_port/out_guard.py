"""What ``--force`` may replace: an earlier cudnn-port output exactly as it was written, and nothing else.

An earlier output is a folder whose ``manifest.json`` is ours and lists, with their sha256, every file the folder
holds (besides the manifest and verify's ``parity.json``), each unchanged. A file the user added (``serve.py``,
``data/``), a file edited since, a symbolic link, or a manifest that lists nothing (``{"tool": "cudnn-port"}`` beside
``paper.tex``) would be lost: the folder is refused, naming the first such files, before anything is written.
"""
import os
from typing import List

from .errors import CudnnPortError
from .manifest import MANIFEST, read_ours
from .paths import sha256

REPORT = "parity.json"
MAX_MANIFEST_BYTES = 64 << 20
SHOWN = 3


def check_replaceable(out: str) -> None:
    """Refuse to replace the non-empty folder ``out`` unless it is an unchanged earlier cudnn-port output."""
    links = _links(out)
    if links:
        raise CudnnPortError(f"{out} holds symbolic links ({', '.join(links[:SHOWN])}); cudnn-port never writes "
                             "through links nor replaces a folder holding them; choose a new folder")
    listed = _listed(out)
    if listed is None:
        raise CudnnPortError(f"{out} is not a cudnn-port output (no manifest.json of ours listing its files), so "
                             "--force will not replace it; choose a new folder")
    lost = []
    for root, dirs, files in os.walk(out):
        dirs.sort()
        rel_root = os.path.relpath(root, out)  # empty folders hold nothing to lose (saved_model/assets/ is one)
        for name in sorted(files):
            rel = os.path.normpath(os.path.join(rel_root, name))
            if rel in (MANIFEST, REPORT):
                continue
            if rel not in listed:
                lost.append(rel)
            elif sha256(os.path.join(root, name)) != listed[rel]:
                lost.append(f"{rel} (changed since it was written)")
            if len(lost) >= SHOWN:
                break
        if len(lost) >= SHOWN:
            break
    if lost:
        raise CudnnPortError(f"--force would delete files of {out} that are not the earlier output as written: "
                             f"{', '.join(lost)}; move them out first, or choose a new folder")


def _links(out) -> List[str]:
    found = []
    for root, dirs, files in os.walk(out):
        found += [os.path.relpath(os.path.join(root, n), out) for n in dirs + files
                  if os.path.islink(os.path.join(root, n))]
    return sorted(found)


def _listed(out):
    """{relative path: sha256} the manifest lists, or None if it is not a manifest of ours that lists files."""
    path = os.path.join(out, MANIFEST)
    manifest = read_ours(path, MAX_MANIFEST_BYTES) if os.path.isfile(path) else None
    if manifest is None:
        return None
    files = manifest.get("files")
    if not isinstance(files, dict) or not files or not all(isinstance(v, str) for v in files.values()):
        return None
    return {os.path.normpath(k): v for k, v in files.items() if isinstance(k, str)}
