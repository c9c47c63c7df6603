"""An HDF5 file read as Keras 3 reads one (``keras/src/saving/saving_lib.py``, ``safe_get_h5_dataset``), checked
before any dataset's values are read.

Plain h5py follows whatever the file says: an external link or a soft link into another file, a dataset whose
bytes are stored in an outside file (``/proc/self/environ``, a FIFO that blocks the reader for ever), a virtual
dataset mapping other files, and a chunked dataset that declares gigabytes while storing no chunk at all (17 KB of
file, 2.1 GB of memory once read). Each is refused here, in one line naming the dataset: the links by how they are
stored, without opening their target; every dataset by its storage, before a byte of it is read.
"""
from typing import TYPE_CHECKING, Optional, Set

from ..errors import CudnnPortError, short

if TYPE_CHECKING:
    import h5py

MAX_EXPANSION = 1000  # a dataset may declare at most this many times the bytes it stores (Keras uses the same)
FREE_BYTES = 1 << 20  # below this a dataset may declare more than it stores (fill values of small arrays)
TOTAL_FREE_BYTES = 64 << 20  # and all of them together at most this much more than MAX_EXPANSION x stored
MAX_OBJECTS = 1 << 20


class _Totals:
    def __init__(self) -> None:
        self.declared = self.stored = self.objects = self.elements = 0
        self.largest: Optional[str] = None
        self.largest_bytes = 0


def check_h5(f: "h5py.File", path: str) -> int:
    """Refuse ``f`` (an open ``h5py.File`` read from ``path``) if it links outside itself, stores data outside
    itself, or declares far more data than it stores; else return how many elements its datasets hold."""
    totals = _Totals()
    seen: Set[int] = set()  # hash(group.id) of each group visited
    _group(f, path, totals, seen)
    if totals.declared > MAX_EXPANSION * totals.stored + TOTAL_FREE_BYTES:
        raise CudnnPortError(f"{path}: its datasets declare {totals.declared} bytes but store {totals.stored} "
                             f"(largest: {short(totals.largest or '?')}); the file is damaged or crafted to exhaust "
                             "memory, so it is not read")
    return totals.elements


def _group(group, path, totals, seen):
    # lazy: h5py, loaded on first use (import cudnn_port stays light)
    import h5py

    key = hash(group.id)  # h5py hashes an object by its file and address
    if key in seen:  # a hard link back up the tree: visited already
        return
    seen.add(key)
    for name in group:
        totals.objects += 1
        where = f"{group.name.rstrip('/')}/{name}"
        if totals.objects > MAX_OBJECTS:
            raise CudnnPortError(f"{path} holds more than {MAX_OBJECTS} objects; it is not a Keras weights file")
        link = group.get(name, getlink=True)
        if isinstance(link, (h5py.ExternalLink, h5py.SoftLink)):
            kind = "an external link" if isinstance(link, h5py.ExternalLink) else "a soft link"
            raise CudnnPortError(f"{path}: {short(where)} is {kind}; cudnn-port (like Keras) reads only data stored "
                                 "in the file itself, so the file is not read")
        item = group[name]
        if isinstance(item, h5py.Group):
            _group(item, path, totals, seen)
        elif isinstance(item, h5py.Dataset):
            _dataset(item, where, path, totals)


def _dataset(dataset, where, path, totals):
    if dataset.is_virtual or dataset.external:
        kind = "a virtual dataset (data mapped from other files)" if dataset.is_virtual else \
            "stored in an outside file"
        raise CudnnPortError(f"{path}: dataset {short(where)} is {kind}; cudnn-port (like Keras) reads only data "
                             "stored in the file itself, so the file is not read")
    declared = int(dataset.size or 0) * dataset.dtype.itemsize
    stored = int(dataset.id.get_storage_size())
    if declared > max(FREE_BYTES, MAX_EXPANSION * stored):
        raise CudnnPortError(f"{path}: dataset {short(where)} declares {declared} bytes but stores {stored}; the "
                             "file is damaged or crafted to exhaust memory, so it is not read")
    totals.declared += declared
    totals.elements += int(dataset.size or 0)
    totals.stored += stored
    if declared >= totals.largest_bytes:
        totals.largest, totals.largest_bytes = where, declared
