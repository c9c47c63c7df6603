"""A Keras model in memory, holding :mod:`cudnn_port.layers` fused layers, seen like a checkpoint.

Each variable is named by the layers it sits in and its name inside the last of them (``encoder/opaque_kernel``,
``embed/embeddings``, ``outer/dropout/seed_generator_state``; :func:`variable_names`), never by Keras' variable path,
which carries per-process counters (``seed_generator_3``) and the scope the model was built in (``sequential/`` when
``fit`` built it): a model exported in the training process and verified in another must name its variables alike.
Each fused layer's buffer is a stack whose spec the layer states; a random generator's state (``Dropout``'s, a
recurrent layer's ``seed_generator_state``) is left out: it is no weight, inference never reads it, and Keras draws
it afresh at every load; its ``cudnn_spec`` and ``cudnn_platform`` variables are left out (the converted
tensors say it all); a layer whose platform record says ROCm / MIOpen is refused. Files are loaded, in Keras' safe
mode, by :mod:`.keras_load`.
"""
import os
import re
from typing import TYPE_CHECKING, Any, Dict, List, Optional

import numpy as np

from ..errors import UnsupportedError
from ..stored_spec import FUSED_CLASS_NAMES, PLATFORM_VARIABLE, SPEC_VARIABLE
from ..source import Source, SourceType
from .platform import refuse_miopen
from ..keras_models.stock_fused import DIRECTIONS, STACKED_CELL
from ..keras_models.stock_keras import plan, rewrite
from ..keras_models.streaming_model import streaming_twin
from .keras_h5 import is_hdf5, is_keras3_model_h5
from .keras_load import load_keras_file as load_keras_file, load_model_file  # load_keras_file: callers import it here

if TYPE_CHECKING:
    import keras


SEED_STATE = "seed_generator_state"  # keras.random.SeedGenerator's variable


def variable_names(model: "keras.Model") -> Dict[int, str]:
    """{id(variable): name} for every variable of ``model``: the names of the layers it sits in (nested models
    included), then its path inside its layer (``lstm_cell/kernel``), or its own name where Keras' path does not pass
    through the layer (a seed generator's state); a name taken twice in one layer gets ``_1``, ``_2``, ..."""
    # lazy: Keras, loaded on first use (import cudnn_port stays light)
    import keras

    from ..keras_models.sized_layers import TimeFolded

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

    def __init__(self, model: "keras.Model", path: Optional[str] = None,
                 original: "Optional[keras.Model]" = None) -> None:
        # lazy: Keras, loaded on first use (import cudnn_port stays light)
        from ..layers import fused_layers

        self.stock_layers = plan(original or model)  # the model's stock recurrent layers, as given: what became of each
        self.original = original or model  # the model as given (its stock layers' own weights judge the stacks)
        self.model, self.path = model, path
        self.prefix = path or f"Keras model {model.name} (in memory)"
        self.specs, self._values, self.shapes, self.dtypes, self._layers = {}, {}, {}, {}, {}
        self._kinds: Dict[str, str] = {}  # {stack: the fused class of its layer (CudnnLSTM ...)}
        fused = fused_layers(model)
        refuse_miopen(self.prefix, ((layer.name, layer.cudnn_platform.numpy()) for layer in fused))
        named = variable_names(model)
        for layer in fused:
            self.specs[named[id(layer.opaque_kernel)]] = layer.spec
            self._layers[named[id(layer.opaque_kernel)]] = layer.name
            self._kinds[named[id(layer.opaque_kernel)]] = FUSED_CLASS_NAMES[layer.spec.mode]
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
        Bidirectional layers (seen as the fused layers :func:`cudnn_port.keras_models.stock_keras.rewrite` makes of
        them)."""
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
        # apart (cudnn_port.keras_models.streaming_model): {layer}_forward/..., {layer}_backward/...
        row = max((r for r in self.stock_layers if name.startswith(r["layer"] + "/") or (
            r["type"] == "Bidirectional" and re.match(re.escape(r["layer"]) + "_(forward|backward)/", name))),
            default=None, key=lambda r: len(r["layer"]))
        kind = self._kinds[name]
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
        return f"fused layer {self._layers[name]} ({self._kinds[name]}), spec stated by the layer"


def _claims(path: str) -> bool:
    """A ``.keras`` file (a zip; also a damaged one, which its reader refuses in words), or a whole model Keras 3
    saved as ``.h5`` (a root ``model_config`` and ``keras_version`` 3.x)."""
    if path.endswith(".keras") and os.path.lexists(path) and not os.path.isdir(path):
        return True
    return os.path.isfile(path) and is_hdf5(path) and is_keras3_model_h5(path)


def _open(path: str, mode: Optional[str] = None) -> KerasModelSource:
    """The source of a file :func:`_claims` took (``mode`` is for files that leave it open: never a Keras model)."""
    return KerasModelSource.from_file(path)


SOURCE = SourceType("keras_model", "Keras 3 model (.keras, or a Keras 3 .h5)", "model", _claims, _open, order=20,
                    export="cudnn_port.roads.model:export_keras_file")
