"""Every file kind PyTorch users save, recognised by content, read as data (no torch; nothing of the file runs):

- ``torch.save`` (1.6+: ``.pt``, ``.pth``, ``.bin``, ``.ckpt``): a zip holding ``<name>/data.pkl``; the pickle
  (:mod:`.torch_pickle`), storages from ``<name>/data/<key>``;
- TorchScript (``torch.jit.save``): the same zip plus ``<name>/code/``; ``data.pkl`` holds the modules' attributes,
  the code their ``Final`` constants (read as text);
- ``torch.export.save`` (``.pt2``): a zip holding ``archive_format``; the weights' JSON config and raw bytes, each
  recurrent node's arguments from the graph JSON (its pickles, sample inputs and constants, are never read);
- legacy ``torch.save`` (before 1.6): a pickle of PyTorch's magic number, the pickle, then the storages after it;
- safetensors: an 8-byte header length, a JSON header, raw bytes.

:func:`read_torch_file` returns a :class:`TorchFile`: the object the file holds (a state_dict, a checkpoint dict, an
inert module tree) with NumPy arrays for tensors. The facts come from torch/serialization.py, torch/_export/ and
the safetensors format (docs/sources.md).
"""
import json
import os
import struct
import zipfile
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import numpy as np

from ..errors import CudnnPortError, reason, short
from .safetensors_file import MAX_HEADER, read_safetensors
from .torch_objects import TORCH_DTYPES, Inert, Storage, numpy_dtype, resolve, tensor_view
from .torch_pickle import unpickle
from .zip_guard import check_members

LEGACY_MAGIC = 0x1950a86a20f9469cfc6c  # torch/serialization.py MAGIC_NUMBER
MAX_PICKLE = 64 << 20  # a data.pkl this large holds no model's weights (they are in the storages beside it)
MAX_STORAGES = 200000  # zip members: one per storage; a GPU-trained RNN keeps all its weights in one


@dataclass
class TorchFile:
    """What a PyTorch file holds, as data: ``kind`` (words), ``root`` (the unpickled object: a dict of arrays, a
    checkpoint dict, an :class:`~cudnn_port.readers.torch_objects.Inert` module), ``nodes`` (a ``.pt2``'s recurrent
    graph nodes: {"target", "params" (parameter names), "args"}), ``metadata`` (safetensors' ``__metadata__``)."""

    path: str
    kind: str
    root: Any
    nodes: List[Dict[str, Any]] = field(default_factory=list)
    metadata: Dict[str, str] = field(default_factory=dict)


def sniff(path: str) -> Optional[str]:
    """The PyTorch file kind of ``path`` by its content ("zip", "legacy", "safetensors"), or None."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
            if head[:4] == b"PK\x03\x04":
                if head[8:9] == b"{":  # also reads as a safetensors header: two files in one, each reader its own
                    raise CudnnPortError(f"{path} reads both as a zip archive and as a safetensors file, so which "
                                         "weights it holds depends on the reader; it is not read")
                return "zip" if _torch_zip(path) else None
            if len(head) >= 9 and head[8:9] == b"{":
                (n,) = struct.unpack("<Q", head[:8])
                return "safetensors" if 2 <= n <= MAX_HEADER else None
            if head[:2] == b"\x80\x02" and head[2:3] == b"\x8a":  # PROTO 2, LONG1: the magic number
                return "legacy"
    except OSError:
        return None
    return None


def zip_names(path: str) -> list:
    """The member names of the zip archive at ``path``, or [] where it is none."""
    try:
        with zipfile.ZipFile(path) as z:
            return z.namelist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return []


def _torch_zip(path: str) -> bool:
    return any(n.endswith("/data.pkl") or n == "data.pkl" or n.endswith("archive_format") for n in zip_names(path))


def read_torch_file(path: str) -> TorchFile:
    """The PyTorch file at ``path`` (any kind of :func:`sniff`), read as data."""
    kind = sniff(path)
    try:
        if kind == "zip":
            return _read_zip(path)
        if kind == "legacy":
            return _read_legacy(path)
        if kind == "safetensors":
            return _read_safetensors(path)
    except CudnnPortError:
        raise
    except (OSError, zipfile.BadZipFile, struct.error, json.JSONDecodeError, KeyError, ValueError, TypeError,
            EOFError, AttributeError, IndexError, LookupError, RecursionError, MemoryError, OverflowError) as e:
        raise CudnnPortError(f"cannot read {path} as a PyTorch file ({reason(e)}); is it complete and undamaged?") \
            from None
    raise CudnnPortError(f"{path} is not a PyTorch file (torch.save, TorchScript, torch.export or safetensors)")


def _read_zip(path):
    with zipfile.ZipFile(path) as z:
        check_members(z, path, "a PyTorch file holds one per tensor storage", max_members=MAX_STORAGES)
        names = z.namelist()
        if any(n.endswith("archive_format") for n in names) or any("/models/" in n and n.endswith(".json")
                                                                    for n in names):
            return _read_pt2(path, z, names)
        pkl = next(n for n in names if n.endswith("/data.pkl") or n == "data.pkl")
        root_dir = pkl[:-len("data.pkl")]
        scripted = any(n.startswith(root_dir + "code/") for n in names) or root_dir + "constants.pkl" in names
        order = z.read(root_dir + "byteorder").decode().strip() if root_dir + "byteorder" in names else "little"
        if z.getinfo(pkl).file_size > MAX_PICKLE:
            raise CudnnPortError(f"{path}: its pickle inflates to {z.getinfo(pkl).file_size} bytes; a model's "
                                 "pickle names its tensors in far less, so it is not read")
        obj, storages = unpickle(z.read(pkl), os.path.basename(path))
        for key, storage in storages.items():
            if storage.dtype == "quantized":  # never read: the reader names the module holding it
                continue
            member = f"{root_dir}data/{key}"
            if member not in names:
                raise CudnnPortError(f"{path}: storage {short(key, 20)} is named but not stored; the file is damaged")
            storage.array = _raw(z, member, storage.dtype, order)
        kind = "TorchScript archive (torch.jit.save)" if scripted else "torch.save archive"
        return TorchFile(path, kind, resolve(obj))


def _raw(z, member, dtype, order="little"):
    """A zip member's bytes as a flat array of ``dtype``: mapped from the file, read-only, where the member is stored
    uncompressed (as torch.save stores every storage), so no copy is made until the artifacts need one."""
    info = z.getinfo(member)
    dt = numpy_dtype(dtype).newbyteorder("<" if order == "little" else ">") if dtype not in ("bool", "bfloat16") \
        else numpy_dtype(dtype)
    if info.file_size % dt.itemsize:
        raise CudnnPortError(f"{member} holds {info.file_size} bytes, not a whole number of {dtype} elements")
    start = _stored_offset(z, info)
    if start is not None and info.file_size:
        flat = np.memmap(z.filename, dtype=dt, mode="r", offset=start, shape=(info.file_size // dt.itemsize,))
    else:
        flat = np.frombuffer(z.read(member), dtype=dt)
    return flat if dt.isnative or dt.itemsize == 1 else flat.astype(dt.newbyteorder("="))


def _stored_offset(z, info):
    """Where an uncompressed, unencrypted member's bytes start in the file (after its local header), or None."""
    if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1 or not isinstance(z.filename, str):
        return None
    with open(z.filename, "rb") as f:
        f.seek(info.header_offset)
        header = f.read(30)
        size = os.fstat(f.fileno()).st_size
    if len(header) < 30 or header[:4] != b"PK\x03\x04":
        return None
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    start = info.header_offset + 30 + name_len + extra_len
    return start if start + info.file_size <= size else None


def _read_legacy(path):
    """torch/serialization.py ``_legacy_load``: magic number, protocol version, system info, the pickle, the list of
    storage keys, then each storage as an int64 element count and its bytes, in that order."""
    with open(path, "rb") as f:
        magic, _ = unpickle(f, os.path.basename(path))
        if magic != LEGACY_MAGIC:
            raise CudnnPortError(f"{path} is not a PyTorch file (a pickle, but not torch.save's)")
        unpickle(f, path)  # protocol version
        info, _ = unpickle(f, path)  # sys info: little_endian, type sizes
        little = not isinstance(info, dict) or info.get("little_endian", True)
        obj, storages = unpickle(f, os.path.basename(path))
        keys, _ = unpickle(f, path)
        size = os.fstat(f.fileno()).st_size
        for key in keys:
            storage = storages.get(str(key))
            if storage is None:
                raise CudnnPortError(f"{path}: storage {short(str(key), 20)} is stored but never named; the file is "
                                     "damaged")
            if storage.dtype == "quantized":
                raise CudnnPortError(f"{path} holds quantized tensors, which no cuDNN stack holds; convert the float "
                                     "model before it was quantized")
            (numel,) = struct.unpack("<q" if little else ">q", f.read(8))
            dt = numpy_dtype(storage.dtype)
            if numel < 0 or f.tell() + numel * dt.itemsize > size:
                raise CudnnPortError(f"{path}: storage {short(str(key), 20)} declares {numel} elements, more than the "
                                     "file holds; the file is damaged")
            raw = np.frombuffer(f.read(numel * dt.itemsize), dtype=dt if little else dt.newbyteorder(">"))
            storage.array = raw.astype(dt, copy=False)
    return TorchFile(path, "legacy torch.save file (PyTorch < 1.6)", resolve(obj))


def _read_safetensors(path: str) -> TorchFile:
    tensors, metadata = read_safetensors(path)
    return TorchFile(path, "safetensors file", tensors, metadata=metadata)


def _read_pt2(path, z, names):
    """A ``torch.export.save`` archive: ``models/<name>.json`` (the graph and its signature),
    ``data/weights/<name>_weights_config.json`` (per parameter: its file, dtype, sizes, strides, offset) and
    ``data/weights/<file>`` raw bytes. Sample inputs and constants are pickles and are never read."""
    model = next((n for n in names if "/models/" in n and n.endswith(".json") and "weights" not in n), None)
    config = next((n for n in names if n.endswith("_weights_config.json")), None)
    if model is None or config is None:
        raise CudnnPortError(f"{path}: a torch.export archive without its model or weights JSON; save it again with "
                             "torch.export.save")
    root_dir = config[:config.index("data/weights/")]
    weights = json.loads(z.read(config))
    entries = weights.get("config", weights) if isinstance(weights, dict) else None
    if not isinstance(entries, dict) or not all(isinstance(e, dict) for e in entries.values()):
        raise CudnnPortError(f"{path}: its weights config is not a table of tensors; save it again with "
                             "torch.export.save")
    tensors = {}
    for name, entry in entries.items():
        if entry.get("use_pickle"):  # a tensor subclass torch.export pickles: never unpickled here
            raise CudnnPortError(f"{path}: weight {short(name)} is stored as a pickle, which is not read; export the "
                                 "model with plain tensors")
        meta = entry.get("tensor_meta", entry)
        dtype = _pt2_dtype(meta.get("dtype"))
        sizes = [int(_as_int(s)) for s in meta.get("sizes", [])]
        strides = [int(_as_int(s)) for s in meta.get("strides", [])]
        offset = int(_as_int(meta.get("storage_offset", 0)))
        member = root_dir + "data/weights/" + entry["path_name"]
        flat = _raw(z, member, dtype)
        storage = Storage(member, dtype, flat.size, "cpu")
        storage.array = flat
        tensors[name] = tensor_view(storage, offset, tuple(sizes), tuple(strides))
    graph = json.loads(z.read(model))
    return TorchFile(path, "torch.export archive (.pt2)", tensors, nodes=_pt2_rnn_nodes(graph))


PT2_DTYPES = {1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "float16", 7: "float32", 8: "float64",
              12: "bool", 13: "bfloat16"}  # torch/_export/serde/schema.py ScalarType


def _pt2_dtype(value):
    if isinstance(value, int) and value in PT2_DTYPES:
        return PT2_DTYPES[value]
    if isinstance(value, str) and value.lower().replace("torch.", "") in TORCH_DTYPES:
        return TORCH_DTYPES[value.lower().replace("torch.", "")]
    raise CudnnPortError(f"a torch.export weight of dtype {short(repr(value), 30)}, which no model's weights have")


def _as_int(value):
    """A serialized SymInt: {"as_int": 3} (torch/_export/serde/schema.py), or a bare int."""
    if isinstance(value, dict):
        if "as_int" in value:
            return value["as_int"]
        raise CudnnPortError("a torch.export weight has a symbolic size; export it with static weight shapes")
    return value


RNN_TARGETS = ("torch.ops.aten.lstm.input", "torch.ops.aten.gru.input", "torch.ops.aten.rnn_tanh.input",
               "torch.ops.aten.rnn_relu.input")


def _pt2_rnn_nodes(graph):
    """Each recurrent node of a ``.pt2`` graph: its op, the parameters it reads (by the signature's FQNs) and its
    scalar arguments (has_biases, num_layers, dropout, train, bidirectional, batch_first)."""
    module = graph.get("graph_module", graph)
    sig = module.get("signature", {})
    fqn = {}
    for spec in sig.get("input_specs", []):
        for kind in ("parameter", "buffer"):
            if kind in spec:
                fqn[spec[kind]["arg"]["name"]] = spec[kind].get("parameter_name") or spec[kind].get("buffer_name")
    nodes = []
    for node in module.get("graph", {}).get("nodes", []):
        target = node.get("target", "")
        if target not in RNN_TARGETS:
            continue
        args = {}
        params = []
        for i, inp in enumerate(node.get("inputs", [])):
            arg = inp.get("arg", {})
            if "as_tensors" in arg:
                params = [fqn.get(t["name"], t["name"]) for t in arg["as_tensors"]]
                if inp.get("name") == "hx":
                    args["hx"] = len(params)
                    params = []
                    continue
                args["params"] = params
            for key in ("as_bool", "as_int", "as_float"):
                if key in arg:
                    args[inp.get("name", str(i))] = arg[key]
        nodes.append({"target": target.split(".")[3], "params": args.pop("params", []), "args": args})
    return nodes


def state_of(obj: Any) -> Dict[str, Any]:
    """An inert object's attribute dict, or {} (a plain value)."""
    return obj.attrs if isinstance(obj, Inert) else {}
