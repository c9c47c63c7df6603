"""A TensorFlow checkpoint's ``.index`` file, read and checked in pure Python before TensorFlow opens it.

TensorFlow's C++ reader aborts the whole process (SIGABRT, no message) on some malformed entries, e.g. a shape
with a negative dimension, and raises odd Python errors on others (an unknown dtype). So every entry is checked
here first; a bad one is a one-line :class:`~cudnn_port.errors.CudnnPortError` naming it.

The format (TensorFlow ``core/util/tensor_bundle``, stored with ``core/lib/io/table``, LevelDB's table layout)::

    file   = data blocks .. | metaindex block | index block | footer (48 bytes)
    footer = varint64 offset, size of the metaindex block, then of the index block, zero padding to 40 bytes,
             fixed64 magic 0xdb4775248b80fb57
    block  = entries | fixed32 restart offsets | fixed32 restart count, then a 5-byte trailer (type, crc)
    entry  = varint32 shared key bytes, varint32 unshared, varint32 value length, key suffix, value
    index block values: a block handle (varint64 offset, varint64 size) of each data block
    data block: key "" -> BundleHeaderProto {1: num_shards, 2: endianness (0 little), 3: version}
                key NAME -> BundleEntryProto {1: dtype, 2: shape {2: dim {1: size}, 3: unknown_rank},
                                              3: shard_id, 4: offset, 5: size, 6: crc32c, 7: slices}
"""
import os
import struct
from typing import Any, Dict, Optional, Tuple

from .errors import CudnnPortError, short
from .paths import require_file

MAGIC = 0xDB4775248B80FB57
FOOTER = 48
ITEMSIZE = {1: 4, 2: 8, 3: 4, 4: 1, 5: 2, 6: 1, 8: 8, 9: 8, 10: 1, 11: 1, 12: 1, 13: 4, 14: 2, 15: 2, 16: 2, 17: 2,
            18: 16, 19: 2, 22: 4, 23: 8, 24: 1, 25: 1, 26: 1, 27: 1, 28: 1}
VARIABLE_SIZE = {7, 20, 21, 29, 30}  # string, resource, variant, int4, uint4: no fixed bytes per element
MAX_ELEMENTS = 1 << 40
# the wire types of the fields read (0 varint, 2 length-delimited, 5 fixed32), from tensor_bundle.proto and
# tensor_shape.proto
HEADER_WIRES = {1: 0, 2: 0, 3: 2}  # num_shards, endianness, version
ENTRY_WIRES = {1: 0, 2: 2, 3: 0, 4: 0, 5: 0, 6: 5, 7: 2}  # dtype, shape, shard_id, offset, size, crc32c, slices
SHAPE_WIRES = {2: 2, 3: 0}  # dim, unknown_rank
DIM_WIRES = {1: 0, 2: 2}  # size, name


class _Corrupt(Exception):
    pass


def _varint(data, pos):
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise _Corrupt("a truncated number")
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if not byte & 0x80:
            return value, pos
        shift += 7


def _signed(value):
    return value - (1 << 64) if value >= 1 << 63 else value


def _fields(data, wires):
    """(field number, wire type, value) of a protobuf message; length-delimited values as bytes. ``wires``: {field:
    the wire type its schema gives it}; a known field of another wire type is corruption (a flipped bit in a key
    turns a number into bytes, or a message into a number)."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            value, pos = data[pos:pos + 8], pos + 8
        elif wire == 2:
            size, pos = _varint(data, pos)
            value, pos = data[pos:pos + size], pos + size
        elif wire == 5:
            value, pos = data[pos:pos + 4], pos + 4
        else:
            raise _Corrupt(f"wire type {wire}")
        if pos > len(data):
            raise _Corrupt("a truncated field")
        if wires.get(field, wire) != wire:
            raise _Corrupt(f"field {field} of wire type {wire}, not {wires[field]}")
        yield field, wire, value


def _block(data, offset, size):
    """The (key, value) entries of the block at ``offset``."""
    if offset < 0 or size < 4 or offset + size > len(data):
        raise _Corrupt("a block outside the file")
    block = data[offset:offset + size]
    restarts = struct.unpack_from("<I", block, size - 4)[0]
    end = size - 4 - 4 * restarts
    if end < 0:
        raise _Corrupt("a block's restart table")
    pos, key = 0, b""
    while pos < end:
        shared, pos = _varint(block, pos)
        unshared, pos = _varint(block, pos)
        length, pos = _varint(block, pos)
        if shared > len(key) or pos + unshared + length > end:
            raise _Corrupt("a block entry")
        key = key[:shared] + block[pos:pos + unshared]
        pos += unshared
        yield key, block[pos:pos + length]
        pos += length


def _handle(value):
    offset, pos = _varint(value, 0)
    size, _ = _varint(value, pos)
    return offset, size


def read_index(path: str) -> Tuple[Dict[int, Any], Dict[str, Dict[str, Any]]]:
    """{name: {"dtype", "shape", "shard", "offset", "size", "sliced"}} and the header of ``path`` (an .index file)."""
    with open(require_file(path, "checkpoint index"), "rb") as f:
        data = f.read()
    if len(data) < FOOTER or struct.unpack_from("<Q", data, len(data) - 8)[0] != MAGIC:
        raise _Corrupt("no table footer")
    footer, pos = data[len(data) - FOOTER:], 0
    for _ in range(2):  # skip the metaindex handle
        _, pos = _varint(footer, pos)
    index_offset, index_size = _handle(footer[pos:])
    header: Optional[Dict[int, Any]] = None
    entries: Dict[str, Dict[str, Any]] = {}
    for _, handle in _block(data, index_offset, index_size):
        for key, value in _block(data, *_handle(handle)):
            if key == b"":
                header = {f: v for f, _, v in _fields(value, HEADER_WIRES)}
                continue
            entry: Dict[str, Any] = {"dtype": 0, "shape": [], "shard": 0, "offset": 0, "size": 0, "sliced": False,
                                     "unknown": False, "crc32c": None}
            for field, _, v in _fields(value, ENTRY_WIRES):
                if field == 1:
                    entry["dtype"] = v
                elif field == 2:
                    for f2, _, v2 in _fields(v, SHAPE_WIRES):
                        if f2 == 2:
                            entry["shape"].append(_signed(dict((a, b) for a, _, b in _fields(v2, DIM_WIRES)).get(1, 0)))
                        elif f2 == 3 and v2:
                            entry["unknown"] = True
                elif field in (3, 4, 5):
                    entry[{3: "shard", 4: "offset", 5: "size"}[field]] = _signed(v)
                elif field == 6:
                    entry["crc32c"] = v
                elif field == 7:
                    entry["sliced"] = True
            entries[key.decode("utf8", "replace")] = entry
    if header is None:
        raise _Corrupt("no bundle header")
    return header, entries


def check(prefix: str) -> Dict[str, Dict[str, Any]]:
    """Refuse a checkpoint whose index TensorFlow would crash or mislead on; returns the entries."""
    index = prefix + ".index"
    try:
        header, entries = read_index(index)
    except (_Corrupt, struct.error, UnicodeError) as e:
        raise CudnnPortError(f"cannot read checkpoint {prefix}: its .index file is corrupt ({e}); is it a "
                             "complete TensorFlow checkpoint (prefix.index + prefix.data-*)?") from None
    shards = header.get(1, 1)
    if header.get(2, 0) != 0:
        raise CudnnPortError(f"checkpoint {prefix} was written on a big-endian machine; convert it there, or "
                             "re-save it on a little-endian one")
    if not 1 <= shards <= 100000:
        raise CudnnPortError(f"checkpoint {prefix}: its .index declares {shards} data shards; the file is corrupt")
    sizes: Dict[str, int] = {}
    for name, entry in entries.items():
        where = f"checkpoint {prefix}: entry {short(name)}"
        if entry["dtype"] not in ITEMSIZE and entry["dtype"] not in VARIABLE_SIZE:
            raise CudnnPortError(f"{where} has an unknown dtype code {entry['dtype']}; the .index file is corrupt")
        if entry["unknown"] or any(d < 0 for d in entry["shape"]):
            raise CudnnPortError(f"{where} declares shape {entry['shape']}; the .index file is corrupt")
        count = 1
        for d in entry["shape"]:
            count = min(count * d, MAX_ELEMENTS + 1)
        if count > MAX_ELEMENTS:
            raise CudnnPortError(f"{where} declares {count - 1}+ elements; the .index file is corrupt")
        if entry["sliced"]:
            continue  # a partitioned variable: its slices are separate entries
        if not 0 <= entry["shard"] < shards or entry["offset"] < 0 or entry["size"] < 0:
            raise CudnnPortError(f"{where} points outside the data files; the .index file is corrupt")
        data = f"{prefix}.data-{entry['shard']:05d}-of-{shards:05d}"
        if data not in sizes:
            sizes[data] = os.path.getsize(require_file(data, "checkpoint data file"))
        if entry["offset"] + entry["size"] > sizes[data]:
            raise CudnnPortError(f"{where} needs bytes up to {entry['offset'] + entry['size']} of "
                                 f"{os.path.basename(data)}, which has {sizes[data]}; the data file is truncated")
        if entry["dtype"] in ITEMSIZE and entry["size"] != count * ITEMSIZE[entry["dtype"]]:
            raise CudnnPortError(f"{where} holds {entry['size']} bytes for shape {entry['shape']}; the .index file is "
                                 "corrupt")
        if entry["dtype"] in VARIABLE_SIZE and count > entry["size"] * (2 if entry["dtype"] in (29, 30) else 1):
            raise CudnnPortError(f"{where} declares {count} elements in {entry['size']} bytes (at least one byte "
                                 "each); the .index file is corrupt or crafted to exhaust memory")
    return entries
