"""A Keras model in memory, holding :mod:`cudnn_port.layers` fused layers, seen like a checkpoint.

Each variable is named by the layers it sits in and its name inside the last of them (``encoder/opaque_kernel``,
``embed/embeddings``, ``outer/dropout/seed_generator_state``; :func:`variable_names`), never by Keras' variable path,
which carries per-process counters (``seed_generator_3``) and the scope the model was built in (``sequential/`` when
``fit`` built it): a model exported in the training process and verified in another must name its variables alike.
Each fused layer's buffer is a stack whose spec the layer states; a random generator's state (``Dropout``'s, a
recurrent layer's ``seed_generator_state``) is left out: it is no weight, inference never reads it, and Keras draws
it afresh at every load; its ``cudnn_spec`` and ``cudnn_platform`` variables are left out (the converted
tensors say it all); a layer whose platform record says ROCm / MIOpen is refused.
"""
import ast
import json
import os
import shutil
import tempfile
import zipfile
import re
from typing import TYPE_CHECKING, Any, Dict, List

import numpy as np

from ..errors import CudnnPortError, UnsupportedError, reason
from ..stored_spec import FUSED_CLASS_NAMES, PLATFORM_VARIABLE, SPEC_VARIABLE
from ..paths import require_file
from ..source import Source, SourceType
from .platform import refuse_miopen
from .zip_guard import check_keras_zip
from ..deps import import_tf
from ..stock_fused import DIRECTIONS, STACKED_CELL
from ..stock_keras import plan, rewrite
from ..streaming_model import streaming_twin
from .config_sizes import check_config_sizes
from .h5_guard import check_h5
from .keras_h5 import is_hdf5, is_keras3_model_h5

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


def _newer_option(error):
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


def _without_option(path, class_name, option, target):
    """A copy of the .keras archive ``path`` at ``target`` whose config drops ``option`` from every object of
    ``class_name`` that holds it as None (its default: the model a Keras without that option builds from the same
    file, the same numbers); None when no object holds it as None (a set option: not ours to drop)."""
    dropped = []

    def drop(node):
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


def _refusal(path, error) -> str:
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


SEED_STATE = "seed_generator_state"  # keras.random.SeedGenerator's variable


def variable_names(model: "keras.Model") -> Dict[int, str]:
    """{id(variable): name} for every variable of ``model``: the names of the layers it sits in (nested models
    included), then its path inside its layer (``lstm_cell/kernel``), or its own name where Keras' path does not pass
    through the layer (a seed generator's state); a name taken twice in one layer gets ``_1``, ``_2``, ..."""
    # lazy: Keras, loaded on first use (import cudnn_port stays light)
    import keras

    from ..sized_layers import TimeFolded

    names, seen = {}, set()

    def walk(container, prefix):
        for layer in getattr(container, "layers", None) or []:
            if id(layer) in seen:  # a shared layer: named where it first appears
                continue
            seen.add(id(layer))
            if isinstance(layer, (keras.Model, TimeFolded)):  # a TimeDistributed's layer: td/inner/...
                walk(layer, f"{prefix}{layer.name}/")
                continue
            taken = set()
            for variable in layer.variables:
                if id(variable) in names:
                    continue
                parts = variable.path.split("/")
                inner = "/".join(parts[parts.index(layer.name) + 1:]) if layer.name in parts[:-1] else variable.name
                name, k = f"{prefix}{layer.name}/{inner}", 0
                while name in taken:
                    k += 1
                    name = f"{prefix}{layer.name}/{inner}_{k}"
                taken.add(name)
                names[id(variable)] = name

    walk(model, "")
    for variable in model.variables:  # held by the model itself, outside any layer
        names.setdefault(id(variable), variable.path)
    return names


class KerasModelSource(Source):
    default_style = "keras"
    format = "Keras 3 model"
    names_note = "Keras layer and variable names"
    whole_model = True  # converts as a whole model (cudnn_port.roads.model), not buffer by buffer

    def __init__(self, model, path=None, original=None):
        # lazy: Keras, loaded on first use (import cudnn_port stays light)
        from ..layers import fused_layers

        self.stock_layers = plan(original or model)  # the model's stock recurrent layers, as given: what became of each
        self.original = original or model  # the model as given (its stock layers' own weights judge the stacks)
        self.model, self.path = model, path
        self.prefix = path or f"Keras model {model.name} (in memory)"
        self.specs, self._values, self.shapes, self.dtypes, self._layers = {}, {}, {}, {}, {}
        fused = fused_layers(model)
        refuse_miopen(self.prefix, ((layer.name, layer.cudnn_platform.numpy()) for layer in fused))
        named = variable_names(model)
        for layer in fused:
            self.specs[named[id(layer.opaque_kernel)]] = layer.spec
            self._layers[named[id(layer.opaque_kernel)]] = layer.name
        skip = {id(v) for layer in fused for v in (layer.cudnn_spec, layer.cudnn_platform)}
        for variable in model.variables:
            name = named[id(variable)]
            if id(variable) in skip or name.endswith((f"/{SPEC_VARIABLE}", f"/{PLATFORM_VARIABLE}")) or \
                    re.sub(r"_\d+$", "", name).endswith(SEED_STATE):  # word_enc/seed_generator_state_1 too
                continue
            self._values[name] = variable
            self.shapes[name] = tuple(int(d) for d in variable.shape)
            self.dtypes[name] = np.dtype(variable.dtype).name

    def get(self, name: str) -> np.ndarray:
        return np.asarray(self._values[name].numpy())

    def files(self) -> List[str]:
        return [self.path] if self.path else []

    @classmethod
    def from_file(cls, path: str) -> "KerasModelSource":
        """A ``.keras`` (or Keras 3 ``.h5``) file saved from a model with fused layers, or stock Keras LSTM / GRU /
        Bidirectional layers (seen as the fused layers :func:`cudnn_port.stock_keras.rewrite` makes of them)."""
        model = load_model_file(path)
        try:
            streamed = streaming_twin(model)[0]
        except UnsupportedError:  # a stateful layer that does not stream: inspect lists it as refused
            streamed = model
        return cls(rewrite(streamed, strict=False), os.path.abspath(path), original=model)

    def nothing_found(self) -> str:
        others = "; ".join(f"{r['layer']} ({r['type']}): {r['why']}" for r in self.stock_layers)
        return (f"{self.prefix} holds no layer whose math cuDNN computes (a stock LSTM / GRU / SimpleRNN / "
                f"Bidirectional, or a cudnn_port fused layer){f' ({others})' if others else ''}, so there is "
                "nothing to "
                "convert; export it with Keras' own model.export")

    def layer_of(self, name: str) -> Dict[str, Any]:
        """The user's layer behind stack ``name``: {layer, type} (``LSTM``, ``Bidirectional``, ``CudnnLSTM``...), and
        ``cell`` ([k], or [k, j] for cell j of a StackedRNNCells that is cell k) for a cell of an
        ``RNN(StackedRNNCells(...))``, with ``direction`` (forward / backward) in a ``Bidirectional`` of one."""
        layer = self._layers[name]
        # the row whose path leads to this stack's variable; a stateful Bidirectional streamed with its directions
        # apart (cudnn_port.streaming_model): {layer}_forward/..., {layer}_backward/...
        row = max((r for r in self.stock_layers if name.startswith(r["layer"] + "/") or (
            r["type"] == "Bidirectional" and re.match(re.escape(r["layer"]) + "_(forward|backward)/", name))),
            default=None, key=lambda r: len(r["layer"]))
        kind = FUSED_CLASS_NAMES[self.specs[name].mode]
        if not row:
            return {"layer": layer, "type": kind}
        found = {"layer": row["layer"], "type": row["type"]}
        base = re.escape(row["layer"].rsplit("/", 1)[-1])  # cells' adapters: {layer}(_{direction})_cell_{k}
        step = re.escape(STACKED_CELL.format(layer="", k="")) + r"\d+"
        cell = re.match(base + "(?:_(" + "|".join(DIRECTIONS) + "))?" + f"((?:{step})*)$", layer)
        if not cell or not (cell.group(1) or cell.group(2)):  # a layer's own stack (both directions in one)
            return found
        path = [int(k) for k in re.findall(r"\d+", cell.group(2))]  # none: a Bidirectional's plain half
        where = dict({"cell": path} if path else {}, **({"direction": cell.group(1)} if cell.group(1) else {}))
        return dict(found, **where)

    def describe(self, name: str) -> str:
        spec = self.specs[name]
        kind = FUSED_CLASS_NAMES[spec.mode]
        return f"fused layer {self._layers[name]} ({kind}), spec stated by the layer"


def _claims(path: str) -> bool:
    """A ``.keras`` file (a zip; also a damaged one, which its reader refuses in words), or a whole model Keras 3
    saved as ``.h5`` (a root ``model_config`` and ``keras_version`` 3.x)."""
    if path.endswith(".keras") and os.path.lexists(path) and not os.path.isdir(path):
        return True
    return os.path.isfile(path) and is_hdf5(path) and is_keras3_model_h5(path)


SOURCE = SourceType("keras_model", "Keras 3 model (.keras, or a Keras 3 .h5)", "model", _claims,
                    lambda path, mode=None: KerasModelSource.from_file(path), order=20,
                    export="cudnn_port.roads.model:export_keras_file")
