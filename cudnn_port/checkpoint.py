"""Read TensorFlow checkpoints (TF1 name-based and TF2 object-based) and write name-based ones.

Reading is lazy: shapes and dtypes come from the index; a tensor is read only when asked for. Object-based
keys (``model/rnn/opaque_kernel/.ATTRIBUTES/VARIABLE_VALUE``) are shown by their logical name
(``model/rnn/opaque_kernel``); the object graph itself is not a variable and is not carried over.

Writing goes through TensorFlow's own SaveV2 in shards of bounded size, merged into one checkpoint at the end,
so memory stays near one shard above what the caller holds. TensorFlow is imported only here, and lazily.
"""
import difflib
import glob
import os
from typing import Any, Callable, Iterable, List, Optional, Tuple

import numpy as np

from . import tf_index
from .deps import import_tf
from .errors import CudnnPortError, reason, short
from .paths import is_within, refuse_links_out, require_file
from .source import Source

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
ATTRIBUTE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
SHARD_BYTES = 32 << 20
MAX_STATE_BYTES = 1 << 20  # the `checkpoint` state file: a few lines of text


def resolve_prefix(path: str) -> str:
    """The checkpoint prefix for ``path``: a prefix, its ``.index`` or data file, or a folder holding one."""
    path = os.fspath(path)
    if os.path.isdir(path):
        state = os.path.join(path, "checkpoint")
        if os.path.isfile(state):
            if os.path.getsize(state) > MAX_STATE_BYTES:
                raise CudnnPortError(f"{state} is {os.path.getsize(state)} bytes, not a checkpoint state file; pass "
                                     "the checkpoint prefix itself")
            latest = import_tf().train.latest_checkpoint(path)
            if latest and not is_within(latest, path):
                raise CudnnPortError(f"{state} points to {latest}, outside {path}; cudnn-port reads only the folder "
                                     "given: pass that checkpoint prefix itself if you mean it")
            if latest:
                return latest
        found = sorted(glob.glob(os.path.join(path, "*.index")))
        if len(found) == 1:
            return found[0][:-len(".index")]
        if found:
            raise CudnnPortError(f"{path} holds {len(found)} checkpoints; pass one prefix, e.g. {found[0][:-6]}")
        models = sorted(n for n in os.listdir(path) if n.endswith((".keras", ".h5", ".hdf5")))
        if path.rstrip(os.sep).endswith(MODEL_FILES):
            raise CudnnPortError(_model_folder(path, models))
        if models:
            raise CudnnPortError(f"{path} is a folder holding {' and '.join(models[:2])}"
                                 f"{' and more' if len(models) > 2 else ''}, not a TensorFlow checkpoint; pass the "
                                 f"model file itself, e.g. {os.path.join(path, models[0])}")
        raise CudnnPortError(f"{path} holds no TensorFlow checkpoint (no *.index file), SavedModel or Keras model "
                             "file; pass a checkpoint prefix, a SavedModel folder, or a .keras / .h5 file")
    if path.endswith(".index"):
        path = path[:-len(".index")]
    if ".data-" in os.path.basename(path):
        path = path[:path.rindex(".data-")]
    if not os.path.lexists(path + ".index"):
        raise CudnnPortError(_not_a_model(path) if os.path.isfile(path) else missing_source(path))
    require_file(path + ".index", "checkpoint index")
    return path


MODEL_FILES = (".keras", ".h5", ".hdf5")
KERAS_MEMBERS = ("config.json", "model.weights.h5")  # what model.save("m.keras") zips (with metadata.json)


def _model_folder(path: str, models: List[str]) -> str:
    """What to say of a folder named like a model file (``x.keras``): a folder, not such a file; an unpacked
    ``.keras`` archive said to be one (its ``model.weights.h5`` holds weights only, no model)."""
    kind = os.path.splitext(path.rstrip(os.sep))[1]
    if all(os.path.isfile(os.path.join(path, m)) for m in KERAS_MEMBERS):
        return (f"{path} is a folder, not a {kind} file (an unpacked .keras archive); pass the .keras file "
                "model.save wrote, or zip the folder's files into one: cd into it, zip ../model.keras *")
    models = [m for m in models if m != "model.weights.h5"]
    return (f"{path} is a folder, not a {kind} file; " +
            (f"pass the model file inside it, e.g. {os.path.join(path, models[0])}" if models else
             "pass a .keras or .h5 model file, a SavedModel folder or a checkpoint"))


def _not_a_model(path: str) -> str:
    """What to say of a file that is no source cudnn-port reads (an existing file whose ``.index`` is absent):
    what it is, empty or not a model file of its suffix."""
    size, suffix = os.path.getsize(path), os.path.splitext(path)[1]
    if size == 0:
        return (f"{path} is empty (0 bytes), so it holds no model: it was not written completely; save the model "
                "again (model.save(path)) or copy the file again")
    if path.endswith(MODEL_FILES):
        return (f"{path} ({size} bytes) is not an HDF5 file, so not a Keras {suffix} file (truncated, or another "
                "kind of file renamed); save the model again with model.save(path)")
    return (f"{path} is a file, but not a checkpoint (no {os.path.basename(path)}.index beside it), SavedModel or "
            "Keras model file; pass a checkpoint prefix, a SavedModel folder, or a .keras / .h5 file")


def missing_source(path: str) -> str:
    """What to say of a SOURCE that is not there, with the closest existing name beside it when one is close: a
    model file (``.keras``, ``.h5``) that does not exist, or a checkpoint prefix without its ``.index``."""
    folder, name = os.path.split(os.path.abspath(path))
    entries = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    names = {e[:-len(".index")] if e.endswith(".index") else e for e in entries
             if not e.startswith(".") and ".data-" not in e}
    near = difflib.get_close_matches(name, sorted(names), n=1, cutoff=0.6)
    shown = os.path.join(os.path.dirname(path), near[0]) if near else None
    if name.endswith(MODEL_FILES) or near and near[0].endswith(MODEL_FILES):
        return f"no such file: {path}" + (f"; did you mean {shown}?" if shown else
                                          "; pass a .keras or .h5 model file, a SavedModel folder or a checkpoint")
    return (f"checkpoint not found: {path} (no {name}.index); " +
            (f"did you mean {shown}?" if shown else "pass the prefix, e.g. path/model.ckpt, or the folder holding it"))


class Checkpoint(Source):
    """A checkpoint opened for reading. ``shapes`` and ``dtypes`` map logical names to shape / dtype name.

    The index is checked entry by entry (:mod:`cudnn_port.tf_index`) before TensorFlow's reader sees it."""

    default_style = "tf1"

    def __init__(self, path):
        self.prefix = resolve_prefix(path)
        refuse_links_out(os.path.dirname(os.path.abspath(self.prefix)), "checkpoint", self.files())
        tf_index.check(self.prefix)
        tf = import_tf()
        try:
            self._reader = tf.train.load_checkpoint(self.prefix)
            shapes = self._reader.get_variable_to_shape_map()
            dtypes = self._reader.get_variable_to_dtype_map()
        except (tf.errors.OpError, ValueError, IndexError, RuntimeError, OSError) as e:
            raise CudnnPortError(f"cannot read checkpoint {self.prefix} ({reason(e, 64)}); is it complete "
                                 "(prefix.index and prefix.data-*)?") from None
        self.object_based = OBJECT_GRAPH_KEY in shapes
        self.format = "object-based (TF2)" if self.object_based else "name-based (TF1)"
        self.names_note = ("object-based keys are written under their logical names (without /.ATTRIBUTES/"
                           "VARIABLE_VALUE); the object graph is not carried over" if self.object_based else
                           "names kept as they are")
        self.keys, self.shapes, self.dtypes = {}, {}, {}
        for key in sorted(shapes):
            if key == OBJECT_GRAPH_KEY:
                continue
            name = key[:-len(ATTRIBUTE_SUFFIX)] if key.endswith(ATTRIBUTE_SUFFIX) else key
            self.keys[name] = key
            self.shapes[name] = tuple(int(d) for d in shapes[key])
            self.dtypes[name] = dtypes[key].name

    def get(self, name: str) -> np.ndarray:
        """The value of variable ``name`` as a NumPy array."""
        if name not in self.keys:
            raise CudnnPortError(f"unknown variable {short(name)} in {self.prefix}; run cudnn-port inspect to list "
                                 "them")
        tf = import_tf()
        try:
            value = self._reader.get_tensor(self.keys[name])
        except (tf.errors.OpError, ValueError, IndexError, RuntimeError, OSError) as e:
            raise CudnnPortError(f"cannot read {short(name)} from {self.prefix} ({reason(e, 64)}); "
                                 "the checkpoint's data file is corrupt or truncated") from None
        return np.asarray(value)

    def files(self) -> List[str]:
        """The files that make up this checkpoint (index and data shards)."""
        return sorted(glob.glob(glob.escape(self.prefix) + ".index") + glob.glob(glob.escape(self.prefix) + ".data-*"))


def write_checkpoint(directory: str, items: Iterable[Tuple[str, np.ndarray, str]], name: str = "model.ckpt",
                     progress: Optional[Callable[[str], None]] = None) -> str:
    """Write ``items`` (iterable of (name, array, dtype name)) as a name-based checkpoint ``directory/name``.

    Writes the ``checkpoint`` state file too, so ``tf.train.latest_checkpoint(directory)`` finds it. Arrays are
    consumed one shard (``SHARD_BYTES``) at a time. ``progress(done_bytes)`` is called after each shard.
    """
    tf = import_tf()
    os.makedirs(directory, exist_ok=True)
    prefix = os.path.join(directory, name)
    shard_prefixes: List[str] = []
    names: List[str] = []
    tensors: List[Any] = []  # tf.Tensor
    pending, done, seen = 0, 0, set()

    def flush():
        nonlocal names, tensors, pending, done
        if not names:
            return
        shard = os.path.join(directory, f".shard{len(shard_prefixes)}")
        tf.raw_ops.SaveV2(prefix=shard, tensor_names=names, shape_and_slices=[""] * len(names), tensors=tensors)
        shard_prefixes.append(shard)
        done += pending
        names, tensors, pending = [], [], 0
        if progress:
            progress(done)

    for key, value, dtype in items:
        if key in seen:
            raise CudnnPortError(f"two tensors would be written as {short(key)}; rename one (e.g. with a different "
                                 "--style)")
        seen.add(key)
        names.append(key)
        tensors.append(tf.constant(value, dtype=tf.as_dtype(dtype)))
        pending += np.asarray(value).nbytes
        if pending >= SHARD_BYTES:
            flush()
    flush()
    if not shard_prefixes:
        raise CudnnPortError("nothing to write: the checkpoint would be empty")
    tf.raw_ops.MergeV2Checkpoints(checkpoint_prefixes=shard_prefixes, destination_prefix=prefix,
                                  delete_old_dirs=False)
    with open(os.path.join(directory, "checkpoint"), "w") as f:
        f.write(f'model_checkpoint_path: "{name}"\nall_model_checkpoint_paths: "{name}"\n')
    return prefix


def contiguous(value: np.ndarray, block: int = 256) -> np.ndarray:
    """``value`` as a C-contiguous array. Transposed 2-D views (canonical kernels are ``W.T``) are copied in
    cache-sized blocks, about 6x faster than NumPy's strided copy for large kernels."""
    value = np.asarray(value)
    if value.ndim != 2 or value.flags.c_contiguous or not value.flags.f_contiguous:
        return np.ascontiguousarray(value)
    out = np.empty(value.shape, value.dtype)
    source = value.T  # C-contiguous
    for i in range(0, source.shape[0], block):
        for j in range(0, source.shape[1], block):
            out[j:j + block, i:i + block] = source[i:i + block, j:j + block].T
    return out
