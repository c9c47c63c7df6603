"""A safetensors file read as data (the format is its own: an 8-byte little-endian header length, a JSON header
naming each tensor's dtype, shape and byte range, then the bytes back to back), checked before any byte is trusted:
every tensor lies in the file, fills exactly its shape, and starts where the one before it ends, so no two share a
byte. :mod:`.torch_files` recognises the file by its content and wraps what this returns.
"""
import json
import math
import os
import struct
from typing import Dict, Tuple

import numpy as np

from ..errors import CudnnPortError, short
from .torch_objects import numpy_dtype

SAFETENSORS_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
                      "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool"}
MAX_HEADER = 16 << 20  # a safetensors JSON header this large is not a model's (about 250,000 tensors)


def read_safetensors(path: str) -> Tuple[Dict[str, np.ndarray], Dict[str, str]]:
    """({name: array} of the safetensors file at ``path``, its ``__metadata__``), each tensor checked to lie in the
    file, fit its shape and follow the one before it."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        base, size = 8 + n, os.fstat(f.fileno()).st_size
        if not isinstance(header, dict) or not isinstance(header.get("__metadata__", {}), dict):
            raise CudnnPortError(f"{path}: its safetensors header is not a table of tensors; the file is damaged")
        tensors, end_of = {}, 0
        for name, entry in sorted(((k, v) for k, v in header.items() if k != "__metadata__"),
                                  key=lambda item: item[1].get("data_offsets", [0])[0]
                                  if isinstance(item[1], dict) else 0):
            if not isinstance(entry, dict):
                raise CudnnPortError(f"{path}: tensor {short(name)}'s header entry is not a table; the file is damaged")
            named = entry.get("dtype")
            dtype = SAFETENSORS_DTYPES.get(named) if isinstance(named, str) else None
            if dtype is None:
                raise CudnnPortError(f"{path}: tensor {short(name)} has dtype {named!r}, which no model's "
                                     "weights have")
            start, end = (int(v) for v in entry["data_offsets"])
            shape = tuple(int(d) for d in entry["shape"])
            dt = numpy_dtype(dtype)
            if not 0 <= start <= end or base + end > size or end - start != math.prod(shape) * dt.itemsize or \
                    start != end_of:  # the format stores tensors back to back, none sharing a byte
                raise CudnnPortError(f"{path}: tensor {short(name)} declares bytes {start}..{end}, which do not fit "
                                     "its shape, the file, or the tensor before it; the file is damaged")
            end_of = end
            f.seek(base + start)
            tensors[name] = np.frombuffer(f.read(end - start), dtype=dt).reshape(shape)
    meta = header.get("__metadata__") or {}
    return tensors, {str(k): str(v) for k, v in meta.items()}
