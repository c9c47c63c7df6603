"""A ``.keras`` file (a zip archive) checked before Keras opens it: what each member declares against what it stores.

Keras reads ``config.json`` and ``metadata.json`` whole into memory and inflates ``model.weights.h5``: a 1 MB
archive whose ``config.json`` inflates to 1 GiB took inspect to 2.6 GB. Here, from the central directory alone
(nothing is inflated): a member may not inflate to more than :data:`MAX_RATIO` times its stored bytes (beyond
:data:`FREE_BYTES`), the JSON members not beyond :data:`MAX_JSON_BYTES` at all, and the archive holds at most
:data:`MAX_MEMBERS` members. The weights file inside is then checked as any HDF5 source is
(:mod:`cudnn_port.readers.h5_guard`: no links or data outside it, no declared sizes far above stored ones), and
the layers ``config.json`` declares against the weights it stores (:mod:`cudnn_port.readers.config_sizes`), before
Keras builds any of them.
"""
import zipfile

from ..errors import CudnnPortError, reason, short
from .config_sizes import check_config_sizes
from .h5_guard import check_h5

MAX_RATIO = 200  # Keras stores members uncompressed (ratio 1); JSON deflates about 10x
FREE_BYTES = 1 << 20
MAX_JSON_BYTES = 64 << 20
MAX_MEMBERS = 10000
WEIGHTS = "model.weights.h5"


def check_keras_zip(path: str) -> None:
    """Refuse the ``.keras`` archive at ``path`` if a member would inflate far beyond its stored size, or its
    weights file links to or stores data outside itself."""
    try:
        with zipfile.ZipFile(path) as archive:
            check_members(archive, path, "a .keras file holds a handful")
            stored = _check_weights(archive, path) if WEIGHTS in archive.namelist() else 0
            if "config.json" in archive.namelist():
                check_config_sizes(archive.read("config.json"), stored, path, WEIGHTS)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as e:
        raise CudnnPortError(f"cannot read {path} as a .keras archive ({reason(e)}); save the model again with "
                             "model.save(path)") from None


def check_members(archive: zipfile.ZipFile, path: str, usual: str, max_members: int = MAX_MEMBERS) -> None:
    """Refuse an archive of more than ``max_members`` members (``usual`` says how many its kind holds), or one of
    whose members would inflate far beyond its stored bytes, from the central directory alone."""
    members = archive.infolist()
    if len(members) > max_members:
        raise CudnnPortError(f"{path} holds {len(members)} members; {usual}, so it is not read")
    for info in members:
        limit = MAX_JSON_BYTES if info.filename.endswith(".json") else max(FREE_BYTES, MAX_RATIO * info.compress_size)
        if info.file_size > limit:
            raise CudnnPortError(f"{path}: member {short(info.filename)} inflates to {info.file_size} bytes from "
                                 f"{info.compress_size}; the file is damaged or crafted to exhaust memory, so it is "
                                 "not read")


def _check_weights(archive, path) -> int:
    # lazy: h5py, loaded on first use (import cudnn_port stays light)
    import h5py

    with archive.open(WEIGHTS) as member:
        try:
            f = h5py.File(member, "r")
        except (OSError, ValueError) as e:
            raise CudnnPortError(f"cannot read {WEIGHTS} in {path} ({reason(e)}); save the model again with "
                                 "model.save(path)") from None
        with f:
            return check_h5(f, f"{path} ({WEIGHTS})")
