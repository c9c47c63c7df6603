"""Crafted and mutated inputs for the hardening and fuzz tests: checkpoint indexes rewritten entry by entry (the
table written here from LevelDB's format, read by cudnn_port.tf_index), byte flips and truncations."""
import os
import shutil
import struct

import numpy as np

from cudnn_port import cli
from cudnn_port.tf_index import MAGIC, read_index


def _varint(value):
    value &= (1 << 64) - 1  # negative int64s as protobuf writes them: ten bytes of two's complement
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number, value):
    if isinstance(value, bytes):
        return _varint(number << 3 | 2) + _varint(len(value)) + value
    return _varint(number << 3) + _varint(value)


def entry_bytes(e):
    shape = b"".join(_field(2, _field(1, d)) for d in e["shape"]) + (_field(3, 1) if e.get("unknown") else b"")
    crc = _varint(6 << 3 | 5) + e["crc32c"] if e.get("crc32c") else b""
    return (_field(1, e["dtype"]) + _field(2, shape) + _field(3, e["shard"]) + _field(4, e["offset"])
            + _field(5, e["size"]) + crc)


def _crc32c(data, crc=0):
    """CRC-32C (Castagnoli), bit by bit: the checksum LevelDB's tables keep per block."""
    crc ^= 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def _trailer(block):
    """Compression type 0 and the masked CRC-32C of block + type, as TensorFlow's table reader checks them."""
    crc = _crc32c(block + b"\0")
    masked = (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
    return b"\0" + struct.pack("<I", masked)


def _block(items):
    body = b"".join(_varint(0) + _varint(len(k)) + _varint(len(v)) + k + v for k, v in items)
    return body + struct.pack("<II", 0, 1)


def write_index(path, header, entries):
    """An .index file holding ``header`` ({field number: int}) and ``entries`` ({name: entry dict as read_index
    returns it}), keys sorted, one data block."""
    head = b"".join(_field(k, v if isinstance(v, (int, bytes)) else int(v)) for k, v in sorted(header.items()))
    items = [(b"", head)] + [(k.encode(), entry_bytes(entries[k])) for k in sorted(entries)]
    data = _block(items)
    blob = data + _trailer(data)
    meta_at = len(blob)
    blob += _block([]) + _trailer(_block([]))
    index = _block([(items[-1][0], _varint(0) + _varint(len(data)))])
    index_at = len(blob)
    blob += index + _trailer(index)
    footer = _varint(meta_at) + _varint(len(_block([]))) + _varint(index_at) + _varint(len(index))
    blob += footer + b"\0" * (40 - len(footer)) + struct.pack("<Q", MAGIC)
    with open(path, "wb") as f:
        f.write(blob)


def copy_checkpoint(prefix, folder):
    """A copy of checkpoint ``prefix`` in ``folder``; returns the new prefix."""
    os.makedirs(folder, exist_ok=True)
    for name in os.listdir(os.path.dirname(prefix)):
        if name.startswith(os.path.basename(prefix) + "."):
            shutil.copy(os.path.join(os.path.dirname(prefix), name), folder)
    return os.path.join(folder, os.path.basename(prefix))


def edit_entry(prefix, name, **changes):
    """Rewrite the index of checkpoint ``prefix`` with entry ``name`` changed."""
    header, entries = read_index(prefix + ".index")
    entries[name].update(changes)
    write_index(prefix + ".index", header, entries)


def edit_header(prefix, field, value):
    """Rewrite the index of checkpoint ``prefix`` with header field ``field`` (a BundleHeaderProto number) set."""
    header, entries = read_index(prefix + ".index")
    header[field] = value
    write_index(prefix + ".index", header, entries)


def flip_bytes(path, rng, count):
    data = bytearray(open(path, "rb").read())
    for at in rng.integers(0, len(data), size=count):
        data[at] ^= int(rng.integers(1, 256))
    open(path, "wb").write(bytes(data))


def truncate(path, rng):
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(int(rng.integers(0, max(size, 1))))


def tree_files(folder):
    return sorted(os.path.relpath(os.path.join(r, f), folder) for r, _, fs in os.walk(folder) for f in fs)


__all__ = ["copy_checkpoint", "edit_entry", "edit_header", "flip_bytes", "truncate", "tree_files", "write_index", "np"]


def refused(capsys, *argv, needles=()):
    """The CLI in this process (without progress lines): exit 2 and one line (returned) holding every needle."""
    argv = [str(a) for a in argv] + (["--quiet"] if argv[0] != "inspect" and "--quiet" not in argv else [])
    code = cli.main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("cudnn-port: error: "), (code, err)
    for needle in needles:
        assert needle in err, err
    return err
