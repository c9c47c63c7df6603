"""PyTorch's pickles read as data: nothing in the file runs, and torch is not needed.

``torch.save`` writes a pickle whose tensors are calls of ``torch._utils._rebuild_tensor_v2`` on storages named by
persistent ids; ``torch.save(model)`` adds the model's own classes (``__main__.Model``,
``torch.nn.modules.rnn.LSTM``) and TorchScript's ``data.pkl`` its ``__torch__.*`` classes. A pickle can also call
any importable function (``os.system``, ``builtins.eval``) as it loads. :class:`DataUnpickler` therefore imports
nothing and calls nothing:

- the tensor rebuilders, storages, ``OrderedDict``, ``set`` and TorchScript's list builders are done here, in
  NumPy (offsets and strides honoured: the parameters of a model saved from a GPU are views of one cuDNN buffer);
- any other global is a :class:`Global`; instantiating a class (a name that starts with a capital letter, outside
  the modules below) gives an inert :class:`Inert` holding its class name and attribute dict, which is how the
  settings of a pickled ``nn.LSTM`` (``batch_first``, ``proj_size``, ``nonlinearity``) are read;
- calling anything else, and anything of :data:`REFUSED_MODULES`, raises :class:`~cudnn_port.errors.CudnnPortError`
  naming it: the file is refused before anything of it runs.

Reading follows PyTorch's own format (torch/serialization.py: ``_load`` for zip archives, ``_legacy_load`` for
files written before 1.6); the facts are in docs/sources.md.
"""
import io
import math
import pickle
import struct
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
REFUSED_MODULES = ("os", "posix", "nt", "subprocess", "sys", "builtins", "__builtin__", "shutil", "socket",
                   "importlib", "runpy", "pickle", "_pickle", "marshal", "code", "codeop", "ctypes", "pty", "io",
                   "operator", "functools", "types", "webbrowser", "multiprocessing", "threading", "signal",
                   "tempfile", "pathlib", "glob", "zipfile", "tarfile", "urllib", "http", "requests", "asyncio")
MAX_BROADCAST = 1 << 20  # elements a tensor may hold beyond its storage's (an expanded bias)
MAX_OPS = 4_000_000  # pickle opcodes: a state_dict spends about 30 a tensor; objects beyond that exhaust memory
SAFE_BUILTINS = {"set", "frozenset", "slice", "complex", "tuple", "list", "dict"}
TENSOR_REBUILDERS = {"_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3"}
QUANTIZED = {"_rebuild_qtensor", "_rebuild_sparse_tensor", "_rebuild_sparse_csr_tensor", "_rebuild_nested_tensor",
             "_rebuild_wrapper_subclass", "_rebuild_meta_tensor_no_storage", "_rebuild_device_tensor_from_numpy"}


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
        self.base, self.start, self._array = base, start, None

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


def is_class_name(name: str) -> bool:
    """PyTorch's modules and users' classes are CapWords; functions are lower_case (PEP 8)."""
    last = name.rsplit(".", 1)[-1]
    return bool(last) and last[0].isupper()


def _module_refused(module: str) -> bool:
    return module.split(".")[0] in REFUSED_MODULES and module not in ("builtins", "__builtin__")


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


class DataUnpickler(pickle._Unpickler):  # the pure-Python unpickler: its opcodes can be overridden
    """Unpickles a PyTorch pickle as data (see the module docstring). ``storage(key, dtype, numel, location)``
    returns a storage's flat array; ``what`` names the file in messages."""

    def __init__(self, data: "bytes | io.BufferedIOBase", what: str):
        super().__init__(io.BytesIO(data) if isinstance(data, (bytes, bytearray)) else data)
        self._what, self.storages = what, {}

    # pickle's hooks -------------------------------------------------------------------------------------------------
    def find_class(self, module: str, name: str) -> "_Callable":
        module = "builtins" if module == "__builtin__" else module  # protocol 2 spells Python 2's name
        if _module_refused(module) or (module in ("builtins", "__builtin__") and name not in SAFE_BUILTINS):
            self._refuse(f"{module}.{name}")
        return _Callable(self, Global(module, name))

    def persistent_load(self, pid: Any) -> "Storage":
        if not isinstance(pid, tuple) or not pid or pid[0] != "storage":
            raise CudnnPortError(f"{self._what}: a persistent id {short(repr(pid), 60)} is not a storage; the file is "
                                 "not a PyTorch file")
        # zip: ('storage', storage_type, key, location, numel); legacy: the same plus view_metadata
        storage_type, key, location = pid[1], str(pid[2]), str(pid[3])
        numel = pid[4] if len(pid) > 4 and isinstance(pid[4], int) else None
        dtype = _storage_dtype(storage_type)
        if key not in self.storages:
            self.storages[key] = Storage(key, dtype, numel, location)
        storage = self.storages[key]
        if storage.dtype != dtype:
            raise CudnnPortError(f"{self._what}: storage {short(key, 20)} is read as {storage.dtype} and as {dtype}; "
                                 "the file is damaged")
        if len(pid) > 5 and pid[5] is not None:  # legacy view: (view key, offset, size)
            _, offset, size = pid[5]
            return Storage(key, dtype, int(size), location, base=storage, start=int(offset))
        return storage

    def _refuse(self, what):
        raise CudnnPortError(f"{self._what} calls {short(what, 60)} when unpickled, which a model file has no need "
                             "of; it is not read (nothing of it ran). Save the weights alone with "
                             "torch.save(model.state_dict(), path)")

    # what a call of a global gives ----------------------------------------------------------------------------------
    def call(self, g: Global, args: tuple, kwargs: Optional[dict] = None) -> Any:
        module, name = g.module, g.name
        if kwargs:
            args = args + tuple(kwargs.values())
        if module in ("torch._utils", "torch._tensor", "torch") and name in TENSOR_REBUILDERS:
            storage, offset, size, stride = args[0], args[1], args[2], args[3]
            if not isinstance(storage, Storage):
                raise CudnnPortError(f"{self._what}: a tensor's storage is {short(repr(storage), 40)}; the file is "
                                     "damaged")
            dtype = None
            if name == "_rebuild_tensor_v3" and len(args) > 6:  # (..., backward_hooks, dtype[, metadata])
                g = args[6].g if isinstance(args[6], _Callable) else None
                if g is None or g.module != "torch" or g.name not in TORCH_DTYPES:
                    raise CudnnPortError(f"{self._what}: a tensor of dtype {short(repr(args[6]), 30)}, which no "
                                         "model's weights have")
                dtype = TORCH_DTYPES[g.name]
            return Pending(storage, int(offset), tuple(size), tuple(stride), dtype)
        if module == "torch._utils" and name in ("_rebuild_parameter", "_rebuild_parameter_with_state"):
            return args[0]
        if module == "torch._tensor" and name == "_rebuild_from_type_v2":  # (func, new_type, args, state)
            func, inner = args[0], args[2]
            return func(*inner) if isinstance(func, _Callable) else inner
        if module.startswith("torch") and name == "_rebuild_qtensor":
            return Quantized()
        if module.startswith("torch") and name in QUANTIZED:
            raise CudnnPortError(f"{self._what} holds a tensor torch rebuilds with {name} (sparse, nested, meta or a "
                                 "tensor subclass), which no recurrent layer's weights are; save plain tensors "
                                 "(model.state_dict())")
        if module == "collections" and name == "OrderedDict":
            return dict(*args)
        if module in ("builtins", "__builtin__"):
            if name in ("set", "frozenset", "list", "tuple", "dict"):  # of a container the pickle built, its
                # length charged to the operation budget (a list(x) of one large x, called again and again)
                items = args[0] if args else ()
                if not isinstance(items, (list, tuple, dict)):
                    self._refuse(f"builtins.{name} of {type(items).__name__}")
                self.ops += len(items)
                return dict(items) if name == "dict" else tuple(items) if name == "tuple" else list(items)
            if name == "slice":
                return slice(*args[:3])
            return complex(*(float(a) for a in args[:2]))
        if module == "_codecs" and name == "encode":  # protocol 2's bytes: encode(str, 'latin1')
            codec = str(args[1]).lower().replace("_", "-") if len(args) > 1 else "utf-8"
            if codec not in ("latin1", "latin-1", "iso-8859-1", "utf-8", "utf8", "ascii"):
                self._refuse(f"_codecs.encode with codec {codec}")  # another codec imports its module
            return str(args[0]).encode(codec)
        if module == "torch.jit._pickle":  # TorchScript: restore_type_tag(value, tag), build_intlist(list), ...
            return args[0]
        if module == "torch" and name == "device":
            return str(args[0]) if args else "cpu"
        if module == "torch" and name == "Size":
            return tuple(args[0]) if args else ()
        if module == "copyreg" and name == "_reconstructor":  # protocol 0/1 objects: _reconstructor(cls, base, state)
            cls = args[0].g if isinstance(args[0], _Callable) else None
            if cls is None or not is_class_name(cls.name):
                self._refuse(f"copyreg._reconstructor of {args[0]!r}")
            return Inert(cls)
        if module.startswith("numpy"):  # NumPy scalars and arrays in a checkpoint dict (metrics): kept inert
            return Inert(g, args)
        if is_class_name(name) and not _module_refused(module):
            return Inert(g, args)
        self._refuse(g.qualname)


class _Callable:
    """What ``find_class`` returns: a global that the pickle may call (REDUCE, NEWOBJ), decided by
    :meth:`DataUnpickler.call`, or keep as a value (a dtype, a class reference)."""

    def __init__(self, unpickler: DataUnpickler, g: Global):
        self.unpickler, self.g = unpickler, g

    def __call__(self, *args, **kwargs):
        return self.unpickler.call(self.g, args, kwargs)

    def __repr__(self):
        return f"<{self.g.qualname}>"


class Quantized:
    """A quantized tensor (``torch.quantize_per_tensor``, ``quantize_dynamic``'s packed weights): kept as a marker,
    never read, so the reader can name the module that holds it."""

    def __repr__(self):
        return "<quantized tensor>"


def _storage_dtype(storage_type) -> str:
    g = storage_type.g if isinstance(storage_type, _Callable) else None
    if g is not None and g.name.startswith(("QInt", "QUInt")):
        return "quantized"
    if g is not None and g.name in STORAGE_DTYPES:
        return STORAGE_DTYPES[g.name]
    if g is not None and g.module == "torch" and g.name in TORCH_DTYPES:  # new zips: ('storage', torch.float32, ...)
        return TORCH_DTYPES[g.name]
    raise CudnnPortError(f"a storage of type {short(repr(storage_type), 40)}, which no model's weights have")


def unpickle(data: "bytes | io.BufferedIOBase", what: str) -> Tuple[Any, Dict[str, Storage]]:
    """(the object ``data`` pickles, as data, its tensors still :class:`Pending`; the storages it names by key).
    Fill each storage's ``array``, then :func:`resolve` the object."""
    loader = _Loader(data, what)
    try:
        return loader.load(), loader.storages
    except CudnnPortError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError, IndexError, AttributeError,
            struct.error, UnicodeDecodeError, MemoryError, RecursionError) as e:
        raise CudnnPortError(f"cannot read the pickle in {what} ({type(e).__name__}: {short(str(e), 80)}); the file "
                             "is damaged or not a PyTorch file") from None


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


class _Loader(DataUnpickler):
    """:class:`DataUnpickler` whose calling opcodes (REDUCE, NEWOBJ, OBJ, INST) only reach
    :meth:`DataUnpickler.call`, and whose BUILD sets state on inert objects only."""

    dispatch = dict(pickle._Unpickler.dispatch)
    ops = 0

    def _count(self):
        self.ops += 1
        if self.ops > MAX_OPS:
            raise CudnnPortError(f"{self._what}: its pickle runs past {MAX_OPS} operations, far more than any "
                                 "model's weights need; the file is damaged or crafted to exhaust memory")

    def load_newobj(self):
        self._count()
        args = self.stack.pop()
        cls = self.stack.pop()
        self.append(cls(*args) if isinstance(cls, _Callable) else self._bad("NEWOBJ", cls))

    def load_newobj_ex(self):
        self._count()
        kwargs, args, cls = self.stack.pop(), self.stack.pop(), self.stack.pop()
        self.append(cls(*args, **kwargs) if isinstance(cls, _Callable) else self._bad("NEWOBJ_EX", cls))

    def load_reduce(self):
        self._count()
        args = self.stack.pop()
        func = self.stack[-1]
        self.stack[-1] = func(*args) if isinstance(func, _Callable) else self._bad("REDUCE", func)

    def load_build(self):
        self._count()
        state = self.stack.pop()
        inst = self.stack[-1]
        if isinstance(inst, Inert):
            inst.__setstate__(state)
        elif isinstance(inst, np.ndarray):  # a tensor's BUILD sets Python attributes (requires_grad hooks): nothing
            pass
        # anything else (a dict, whose BUILD sets attributes such as a state_dict's _metadata, never items, as
        # pickle and torch.load do; a list, a str): nothing the weights need

    def load_inst(self):
        self._count()
        module, name = self.readline()[:-1].decode("ascii"), self.readline()[:-1].decode("ascii")
        args = tuple(self.pop_mark())
        self.append(self.find_class(module, name)(*args))

    def load_obj(self):
        self._count()
        args = self.pop_mark()
        cls = args.pop(0)
        self.append(cls(*args) if isinstance(cls, _Callable) else self._bad("OBJ", cls))

    def _bad(self, op, what):
        raise CudnnPortError(f"{self._what}: {op} of {short(repr(what), 40)}, which is not a class the file names; "
                             "the file is damaged or crafted")

    dispatch = {code: (lambda f: lambda self: (self._count(), f(self)))(f) for code, f in dispatch.items()}
    dispatch[pickle.NEWOBJ[0]] = load_newobj
    dispatch[pickle.NEWOBJ_EX[0]] = load_newobj_ex
    dispatch[pickle.REDUCE[0]] = load_reduce
    dispatch[pickle.BUILD[0]] = load_build
    dispatch[pickle.INST[0]] = load_inst
    dispatch[pickle.OBJ[0]] = load_obj
