"""PyTorch's pickles read as data: nothing in the file runs, and torch is not needed.

``torch.save`` writes a pickle whose tensors are calls of ``torch._utils._rebuild_tensor_v2`` on storages named by
persistent ids; ``torch.save(model)`` adds the model's own classes (``__main__.Model``,
``torch.nn.modules.rnn.LSTM``) and TorchScript's ``data.pkl`` its ``__torch__.*`` classes. A pickle can also call
any importable function (``os.system``, ``builtins.eval``) as it loads. :class:`DataUnpickler` therefore imports
nothing and calls nothing:

- the tensor rebuilders, storages, ``OrderedDict``, ``set`` and TorchScript's list builders are done here, in
  NumPy (storages and tensors as :mod:`.torch_objects` holds them, offsets and strides honoured: the parameters of
  a model saved from a GPU are views of one cuDNN buffer);
- any other global is a :class:`~.torch_objects.Global`; instantiating a class (a name that starts with a capital
  letter, outside the modules below) gives an :class:`~.torch_objects.Inert` holding its class name and attribute
  dict, which is how the settings of a pickled ``nn.LSTM`` (``batch_first``, ``proj_size``, ``nonlinearity``) are
  read;
- calling anything else, and anything of :data:`REFUSED_MODULES`, raises :class:`~cudnn_port.errors.CudnnPortError`
  naming it: the file is refused before anything of it runs.

Reading follows PyTorch's own format (torch/serialization.py: ``_load`` for zip archives, ``_legacy_load`` for
files written before 1.6); the facts are in docs/sources.md.
"""
import io
import pickle
import struct
from typing import Any, Callable, ClassVar, Dict, NoReturn, Optional, Tuple

import numpy as np

from ..errors import CudnnPortError, short
from .torch_objects import STORAGE_DTYPES, TORCH_DTYPES, Global, Inert, Pending, Quantized, Storage

REFUSED_MODULES = ("os", "posix", "nt", "subprocess", "sys", "builtins", "__builtin__", "shutil", "socket",
                   "importlib", "runpy", "pickle", "_pickle", "marshal", "code", "codeop", "ctypes", "pty", "io",
                   "operator", "functools", "types", "webbrowser", "multiprocessing", "threading", "signal",
                   "tempfile", "pathlib", "glob", "zipfile", "tarfile", "urllib", "http", "requests", "asyncio")
MAX_OPS = 4_000_000  # pickle opcodes: a state_dict spends about 30 a tensor; objects beyond that exhaust memory
SAFE_BUILTINS = {"set", "frozenset", "slice", "complex", "tuple", "list", "dict"}
TENSOR_REBUILDERS = {"_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3"}
QUANTIZED = {"_rebuild_qtensor", "_rebuild_sparse_tensor", "_rebuild_sparse_csr_tensor", "_rebuild_nested_tensor",
             "_rebuild_wrapper_subclass", "_rebuild_meta_tensor_no_storage", "_rebuild_device_tensor_from_numpy"}


def is_class_name(name: str) -> bool:
    """PyTorch's modules and users' classes are CapWords; functions are lower_case (PEP 8)."""
    last = name.rsplit(".", 1)[-1]
    return bool(last) and last[0].isupper()


def _module_refused(module: str) -> bool:
    return module.split(".")[0] in REFUSED_MODULES and module not in ("builtins", "__builtin__")


class DataUnpickler(pickle._Unpickler):  # the pure-Python unpickler: its opcodes can be overridden
    """Unpickles a PyTorch pickle as data (see the module docstring). ``storage(key, dtype, numel, location)``
    returns a storage's flat array; ``what`` names the file in messages."""

    ops = 0  # pickle operations so far, against MAX_OPS

    def __init__(self, data: "bytes | io.BufferedIOBase", what: str):
        super().__init__(io.BytesIO(data) if isinstance(data, (bytes, bytearray)) else data)
        self._what = what
        self.storages: Dict[str, Storage] = {}

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

    def _refuse(self, what: str) -> NoReturn:
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
                tag = args[6].g if isinstance(args[6], _Callable) else None
                if tag is None or tag.module != "torch" or tag.name not in TORCH_DTYPES:
                    raise CudnnPortError(f"{self._what}: a tensor of dtype {short(repr(args[6]), 30)}, which no "
                                         "model's weights have")
                dtype = TORCH_DTYPES[tag.name]
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
    """(the object ``data`` pickles, as data, its tensors still :class:`~.torch_objects.Pending`; the storages it
    names by key). Fill each storage's ``array``, then :func:`~.torch_objects.resolve` the object."""
    loader = _Loader(data, what)
    try:
        return loader.load(), loader.storages
    except CudnnPortError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError, IndexError, AttributeError,
            struct.error, UnicodeDecodeError, MemoryError, RecursionError) as e:
        raise CudnnPortError(f"cannot read the pickle in {what} ({type(e).__name__}: {short(str(e), 80)}); the file "
                             "is damaged or not a PyTorch file") from None


def _counted(handler: Callable[[Any], None]) -> Callable[[Any], None]:
    """``handler``, run after charging one operation to the loader's budget."""
    def counted(loader: "_Loader") -> None:
        loader._count()
        handler(loader)
    return counted


class _Loader(DataUnpickler):
    """:class:`DataUnpickler` whose calling opcodes (REDUCE, NEWOBJ, OBJ, INST) only reach
    :meth:`DataUnpickler.call`, and whose BUILD sets state on inert objects only."""

    # opcode -> handler, each charging one operation (below); Any: the handlers take this class, not pickle's
    dispatch: ClassVar[Dict[int, Callable[[Any], None]]] = dict(pickle._Unpickler.dispatch)

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

    dispatch = {code: _counted(f) for code, f in dispatch.items()}
    dispatch[pickle.NEWOBJ[0]] = load_newobj
    dispatch[pickle.NEWOBJ_EX[0]] = load_newobj_ex
    dispatch[pickle.REDUCE[0]] = load_reduce
    dispatch[pickle.BUILD[0]] = load_build
    dispatch[pickle.INST[0]] = load_inst
    dispatch[pickle.OBJ[0]] = load_obj
