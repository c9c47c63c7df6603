"""What a PyTorch pickle becomes, as data: storages (their bytes as flat NumPy arrays), the tensors cut from them
(offsets and strides honoured, every view checked to stay inside its storage), the globals a pickle names and inert
objects of its classes, and the dtypes torch writes, in NumPy's names. :mod:`.torch_pickle` builds these from a
pickle without importing or calling anything of it; the readers of :mod:`.torch_files` fill the storages and
:func:`resolve` the result.
"""
import math
from typing import Any, Dict, Optional, Tuple

import numpy as np

from ..errors import CudnnPortError, short

# storage class -> NumPy dtype (torch/storage.py's typed storages)
STORAGE_DTYPES = {
    "DoubleStorage": "float64", "FloatStorage": "float32", "HalfStorage": "float16", "BFloat16Storage": "bfloat16",
    "LongStorage": "int64", "IntStorage": "int32", "ShortStorage": "int16", "CharStorage": "int8",
    "ByteStorage": "uint8", "BoolStorage": "bool", "UntypedStorage": "uint8",
}
# torch.dtype attributes as pickled (GLOBAL torch float32)
TORCH_DTYPES = {"float64": "float64", "double": "float64", "float32": "float32", "float": "float32",
                "float16": "float16", "half": "float16", "bfloat16": "bfloat16", "int64": "int64", "long": "int64",
                "int32": "int32", "int": "int32", "int16": "int16", "int8": "int8", "uint8": "uint8", "bool": "bool"}
MAX_BROADCAST = 1 << 20  # elements a tensor may hold beyond its storage's (an expanded bias)


def bfloat16_dtype() -> Optional[np.dtype]:
    """NumPy's bfloat16 (ml_dtypes, which TensorFlow and Keras bring), or None."""
    try:
        # lazy: ml_dtypes comes with TensorFlow / Keras; only bfloat16 tensors need it
        import ml_dtypes
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


def numpy_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        dtype = bfloat16_dtype()
        if dtype is None:
            raise CudnnPortError("the file holds bfloat16 tensors, which need the ml_dtypes package (pip install "
                                 "ml_dtypes)")
        return dtype
    return np.dtype(name)


class Global:
    """A global the pickle names (module, name), never imported."""

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name

    @property
    def qualname(self) -> str:
        return f"{self.module}.{self.name}"

    def __repr__(self):
        return f"<{self.qualname}>"


class Inert:
    """An object of a class the file names, kept as data: ``cls`` (module.name), ``args``, and ``state`` (what
    BUILD gave it: for a module, its ``__dict__``)."""

    def __init__(self, cls: Global, args: tuple = ()):
        self.cls, self.args, self.state = cls, args, None

    def __setstate__(self, state):
        self.state = state

    @property
    def attrs(self) -> Dict[str, Any]:
        """The object's attribute dict (a pickled ``nn.Module``'s ``__dict__``); {} where it has none."""
        state = self.state
        if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):  # (dict, slots)
            state = {**(state[0] if isinstance(state[0], dict) else {}), **state[1]}
        return state if isinstance(state, dict) else {}

    def __repr__(self):
        return f"<{self.cls.qualname} object>"


class Storage:
    """A storage: its dtype, its element count where the file states it, and (once read) its bytes as a flat NumPy
    array of that dtype. ``base``/``start``: a legacy view of another storage."""

    def __init__(self, key: str, dtype: str, numel: Optional[int], location: str, base: "Optional[Storage]" = None,
                 start: int = 0):
        self.key, self.dtype, self.numel, self.location = key, dtype, numel, location
        self.base, self.start = base, start
        self._array: Optional[np.ndarray] = None

    @property
    def array(self) -> np.ndarray:
        if self.base is not None:
            return self.base.array[self.start:self.start + (self.numel or 0)]
        if self._array is None:
            raise CudnnPortError(f"storage {short(self.key, 20)} is named but never stored; the file is damaged")
        return self._array

    @array.setter
    def array(self, value: np.ndarray) -> None:
        self._array = value


class Pending:
    """A tensor to cut from its storage once every storage is read (a legacy file stores them after the pickle)."""

    def __init__(self, storage: Storage, offset: int, size: tuple, stride: tuple, dtype: Optional[str] = None):
        self.storage, self.offset, self.size, self.stride, self.dtype = storage, offset, size, stride, dtype

    def value(self) -> "np.ndarray | Quantized":
        if self.storage.dtype == "quantized":
            return Quantized()
        storage = self.storage
        if self.dtype is not None and self.dtype != storage.dtype:  # _rebuild_tensor_v3: the bytes of an untyped
            raw = storage.array  # storage read as the tensor's own dtype
            dt = numpy_dtype(self.dtype)
            if raw.dtype.itemsize != 1 or raw.size % dt.itemsize:
                raise CudnnPortError(f"a {self.dtype} tensor over a storage of {raw.size} {raw.dtype} elements; the "
                                     "file is damaged")
            storage = Storage(storage.key, self.dtype, raw.size // dt.itemsize, storage.location)
            storage.array = raw.view(dt)
        return tensor_view(storage, self.offset, self.size, self.stride)


def tensor_view(storage: Storage, offset: int, size: Tuple[int, ...], stride: Tuple[int, ...]) -> np.ndarray:
    """The tensor at ``offset`` with ``size`` and ``stride`` (elements) in ``storage``, as a contiguous array;
    refused where it would reach past the storage."""
    flat = storage.array
    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    if any(s < 0 for s in size) or any(s < 0 for s in stride) or offset < 0 or len(size) != len(stride):
        raise CudnnPortError(f"a tensor declares size {list(size)}, stride {list(stride)} at offset {offset}; the "
                             "file is damaged")
    if 0 in size:
        return np.zeros(size, flat.dtype)
    last = offset + sum((n - 1) * s for n, s in zip(size, stride))
    if last >= flat.size:
        raise CudnnPortError(f"a tensor reaches element {last} of a storage of {flat.size}; the file is damaged")
    count = math.prod(size)
    if count > flat.size + MAX_BROADCAST:  # strides of 0 (or overlapping) spell far more elements than are stored
        raise CudnnPortError(f"a tensor of {count} elements is cut from a storage of {flat.size} (stride "
                             f"{list(stride)}); no model's weights repeat their storage, so the file is not read")
    view = np.lib.stride_tricks.as_strided(flat[offset:], shape=size,
                                           strides=tuple(s * flat.itemsize for s in stride), writeable=False)
    return np.ascontiguousarray(view)


class Quantized:
    """A quantized tensor (``torch.quantize_per_tensor``, ``quantize_dynamic``'s packed weights): kept as a marker,
    never read, so the reader can name the module that holds it."""

    def __repr__(self):
        return "<quantized tensor>"


def resolve(obj: Any, seen: Optional[dict] = None) -> Any:
    """``obj`` with every :class:`Pending` tensor cut from its (now filled) storage, in dicts, lists, tuples and
    inert objects' state alike; an object the pickle shares is resolved once."""
    seen = {} if seen is None else seen
    if id(obj) in seen:
        return seen[id(obj)]
    if isinstance(obj, Pending):
        seen[id(obj)] = obj.value()
        return seen[id(obj)]
    if isinstance(obj, dict):
        seen[id(obj)] = obj
        for k in list(obj):
            obj[k] = resolve(obj[k], seen)
        return obj
    if isinstance(obj, list):
        seen[id(obj)] = obj
        obj[:] = [resolve(v, seen) for v in obj]
        return obj
    if isinstance(obj, tuple):
        seen[id(obj)] = tuple(resolve(v, seen) for v in obj)
        return seen[id(obj)]
    if isinstance(obj, Inert):
        seen[id(obj)] = obj
        obj.args = resolve(obj.args, seen)
        obj.state = resolve(obj.state, seen)
    return obj
