"""Keras model files loaded as Keras loads them, in safe mode (no code from the file runs), with cudnn_port's layers
known to Keras: a ``.keras`` archive after the zip guard (:func:`~.zip_guard.check_keras_zip`), a whole model Keras 3
saved as HDF5 after the HDF5 guard (:func:`~.h5_guard.check_h5`) and its config's sizes checked against its stored
weights. An option a newer Keras wrote at its default None is dropped from a copy; Keras' refusals become one line
saying what was refused and how to load the file yourself (:func:`_refusal`).
"""
import ast
import json
import os
import re
import shutil
import tempfile
import zipfile
from typing import TYPE_CHECKING, Any, Optional, Tuple

from ..deps import import_tf
from ..errors import CudnnPortError, reason
from ..paths import require_file
from .config_sizes import check_config_sizes
from .h5_guard import check_h5
from .keras_h5 import is_hdf5
from .zip_guard import check_keras_zip

if TYPE_CHECKING:
    import keras


def load_keras_file(path: str) -> "keras.Model":
    """Load a ``.keras`` file with cudnn_port's layers known to Keras. A file a newer Keras saved with a layer option
    this Keras does not know, left at its default None (Keras 3.15's ``Embedding(quantization_config=None)`` under
    Keras 3.12), loads from a copy without that option: the same model (:func:`_without_option`)."""
    require_file(path, ".keras file")
    if os.path.getsize(path) == 0 or not zipfile.is_zipfile(path):
        raise CudnnPortError(f"{path} is empty or not a zip archive, so not a complete .keras file; save the model "
                             "again with model.save(path)")
    check_keras_zip(path)
    # lazy: Keras, loaded on first use (import cudnn_port stays light)
    import keras

    from .. import aten_layers, layers  # noqa: F401  (registers CudnnLSTM / CudnnGRU, and AtenOp)

    with tempfile.TemporaryDirectory(prefix="cudnn-port-keras-") as tmp:
        target = path
        for _ in range(MAX_DEFAULTED):
            try:
                return keras.saving.load_model(target, compile=False)  # safe_mode: no code from the file runs
            except Exception as e:
                newer = _newer_option(e)
                copy = newer and _without_option(target, *newer, os.path.join(tmp, f"{len(os.listdir(tmp))}.keras"))
                if not copy:
                    raise CudnnPortError(_refusal(path, e)) from None
                target = copy
        raise CudnnPortError(f"cannot load {path}: it was saved by a newer Keras with more than {MAX_DEFAULTED} "
                             "options this Keras lacks; upgrade Keras (pip install -U keras)")


MAX_DEFAULTED = 16  # options of a newer Keras left at their defaults before giving up


def _newer_option(error: BaseException) -> Optional[Tuple[str, str]]:
    """(class name, option) when Keras refused an option of a layer or initializer that this Keras does not know
    ("Unrecognized keyword arguments passed to Embedding: {'quantization_config': None}", "GlorotUniform.__init__()
    got an unexpected keyword argument 'input_axes'": Keras 3.12 on a 3.15 file), else None."""
    text = str(error)
    found = re.search(r"Unrecognized keyword arguments passed to (\w+): (\{.*?\})", text)
    if found:
        try:
            options = ast.literal_eval(found.group(2))  # a literal dict, never code
        except (ValueError, SyntaxError):
            return None
        return (found.group(1), next(iter(options))) if isinstance(options, dict) and len(options) == 1 else None
    found = re.search(r"(\w+)\.__init__\(\) got an unexpected keyword argument '(\w+)'", text)
    return (found.group(1), found.group(2)) if found else None


def _without_option(path: str, class_name: str, option: str, target: str) -> Optional[str]:
    """A copy of the .keras archive ``path`` at ``target`` whose config drops ``option`` from every object of
    ``class_name`` that holds it as None (its default: the model a Keras without that option builds from the same
    file, the same numbers); None when no object holds it as None (a set option: not ours to drop)."""
    dropped = []

    def drop(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("class_name") == class_name and isinstance(node.get("config"), dict) and \
                    option in node["config"] and node["config"][option] is None:
                del node["config"][option]
                dropped.append(option)
            for value in node.values():
                drop(value)
        elif isinstance(node, list):
            for value in node:
                drop(value)

    with zipfile.ZipFile(path) as source:
        config = json.loads(source.read("config.json"))
        drop(config)
        if not dropped:
            return None
        with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as copy:
            for info in source.infolist():
                copy.writestr(info, json.dumps(config).encode() if info.filename == "config.json" else
                              source.read(info))
    return target


def load_model_file(path: "os.PathLike[str] | str") -> "keras.Model":
    """A Keras model file as Keras loads it, in safe mode: a ``.keras`` archive (:func:`load_keras_file`) or a whole
    model Keras 3 saved as HDF5 (:func:`load_keras_h5`). A model saved before Keras built it is refused."""
    path = os.fspath(path)
    model = load_keras_h5(path) if os.path.isfile(path) and is_hdf5(path) else load_keras_file(path)
    if not model.built:  # a Sequential with no keras.Input that was never called nor fit holds no weights
        raise CudnnPortError(f"{path} holds a model Keras had not built when it was saved, so it has no weights to "
                             "convert; give it a keras.Input (or call or fit it once) before model.save")
    return model


def load_keras_h5(path: str) -> "keras.Model":
    """Load ``model.save("m.h5")`` of Keras 3 (legacy HDF5) with cudnn_port's layers known to Keras, after the HDF5
    guard (:func:`~.h5_guard.check_h5`: no links out, no outside data). Keras takes HDF5 by its suffix alone, so a
    file named otherwise is loaded from a copy named ``model.h5``."""
    # lazy: h5py, Keras, loaded on first use (import cudnn_port stays light)
    import h5py

    path = os.fspath(path)
    require_file(path, "Keras .h5 file")
    try:
        with h5py.File(path, "r") as f:
            stored = check_h5(f, path)
            config = f.attrs.get("model_config")
    except (OSError, KeyError, ValueError, RuntimeError, TypeError) as e:
        raise CudnnPortError(f"cannot read {path} ({reason(e)}); is it a complete Keras .h5 file?") from None
    if config is not None:
        check_config_sizes(config, stored, path, "the file")
    import keras

    from .. import aten_layers, layers  # noqa: F401  (registers CudnnLSTM / CudnnGRU, and AtenOp)

    with tempfile.TemporaryDirectory(prefix="cudnn-port-h5-") as tmp:
        target = path
        if not path.endswith((".h5", ".hdf5")):
            target = os.path.join(tmp, "model.h5")
            shutil.copyfile(path, target)
        try:
            return keras.saving.load_model(target, compile=False, safe_mode=True)  # no code from the file runs
        except Exception as e:
            raise CudnnPortError(_refusal(path, e)) from None


def _is_tf_op(name: str) -> bool:
    """Whether ``name`` is a TensorFlow op's (a layer Keras wrote for an op it traced, not a user's class)."""
    return hasattr(import_tf().raw_ops, name)


def _refusal(path: str, error: BaseException) -> str:
    """Why Keras did not load ``path``: its safe mode refusing code in the file (a Lambda's Python function, a
    class that neither Keras nor cudnn_port defines), or a damaged file."""
    text, how = str(error), "load the model yourself with keras.saving.load_model(path, {}) and pass it to " \
        "cudnn_port.export(model, OUT)"
    if "safe_mode" in text or "arbitrary code" in text:
        return (f"{path} holds Python code (a Lambda layer's function), which Keras' safe mode refuses to load, "
                f"since loading would run it; if you trust the file, {how.format('safe_mode=False')}")
    unknown = re.search(r"Unknown layer: '([^']+)'", text)  # the .h5 loader's words for the same
    if unknown and _is_tf_op(unknown.group(1)):  # Keras 3's .h5 of a mixed-precision mask: a 'NotEqual' op layer
        return (f"Keras itself cannot load {path}: it names a layer {unknown.group(1)!r} (a TensorFlow op, saved by "
                "Keras) that Keras does not read back from .h5; save the model as .keras (model.save('m.keras'))")
    missing = re.search(r"Could not locate (?:class|function) '([^']+)'", text) or unknown
    if missing:
        return (f"{path} uses {missing.group(1)!r}, a custom object whose code is not in the file (neither Keras nor "
                f"cudnn_port defines it); import its code, then {how.format('custom_objects={...}')}")
    kind = ".h5" if path.endswith((".h5", ".hdf5")) else ".keras"
    return f"cannot load {path} as a Keras model ({reason(error)}); is it a complete {kind} file?"
