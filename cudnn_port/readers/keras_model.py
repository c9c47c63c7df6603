"""A Keras model in memory, holding :mod:`cudnn_port.layers` fused layers, seen like a checkpoint.

Names are Keras variable paths (``encoder/opaque_kernel``, ``embed/embeddings``); each fused layer's buffer is a
stack whose spec the layer states; its ``cudnn_spec`` and ``cudnn_platform`` variables are left out (the converted
tensors say it all); a layer whose platform record says ROCm / MIOpen is refused.
"""
import os
import zipfile
from typing import TYPE_CHECKING, List

import numpy as np

from ..errors import CudnnPortError, reason
from ..stored_spec import PLATFORM_VARIABLE, SPEC_VARIABLE
from ..paths import require_file
from ..source import Source
from .platform import refuse_miopen
from .zip_guard import check_keras_zip

if TYPE_CHECKING:
    import keras


def load_keras_file(path: str) -> "keras.Model":
    """Load a ``.keras`` file with cudnn_port's layers known to Keras."""
    require_file(path, ".keras file")
    if os.path.getsize(path) == 0 or not zipfile.is_zipfile(path):
        raise CudnnPortError(f"{path} is empty or not a zip archive, so not a complete .keras file; save the model "
                             "again with model.save(path)")
    check_keras_zip(path)
    import keras

    from .. import layers  # noqa: F401  (registers CudnnLSTM / CudnnGRU)

    try:
        return keras.saving.load_model(path, compile=False)  # safe_mode: no code from the file runs
    except Exception as e:
        raise CudnnPortError(_refusal(path, e)) from None


def _refusal(path, error) -> str:
    """Why Keras did not load ``path``: its safe mode refusing code in the file (a Lambda's Python function, a
    class that neither Keras nor cudnn_port defines), or a damaged file."""
    import re

    text, how = str(error), "load the model yourself with keras.saving.load_model(path, {}) and pass it to " \
        "cudnn_port.export(model, OUT)"
    if "safe_mode" in text or "arbitrary code" in text:
        return (f"{path} holds Python code (a Lambda layer's function), which Keras' safe mode refuses to load, "
                f"since loading would run it; if you trust the file, {how.format('safe_mode=False')}")
    missing = re.search(r"Could not locate (?:class|function) '([^']+)'", text)
    if missing:
        return (f"{path} uses {missing.group(1)!r}, a custom object whose code is not in the file (neither Keras nor "
                f"cudnn_port defines it); import its code, then {how.format('custom_objects={...}')}")
    return f"cannot load {path} as a Keras model ({reason(error)}); is it a complete .keras file?"


class KerasModelSource(Source):
    default_style = "keras"
    format = "Keras 3 model"
    names_note = "Keras variable paths"
    whole_model = True  # converts as a whole model (cudnn_port.model_export), not buffer by buffer

    def __init__(self, model, path=None, original=None):
        from ..layers import fused_layers
        from ..stock_keras import plan

        self.stock_layers = plan(original or model)  # the model's stock recurrent layers, as given: what became of each
        self.path = path
        self.prefix = path or f"Keras model {model.name} (in memory)"
        self.specs, self._values, self.shapes, self.dtypes, self._layers = {}, {}, {}, {}, {}
        fused = fused_layers(model)
        refuse_miopen(self.prefix, ((layer.name, layer.cudnn_platform.numpy()) for layer in fused))
        for layer in fused:
            self.specs[layer.opaque_kernel.path] = layer.spec
            self._layers[layer.opaque_kernel.path] = layer.name
        skip = {v.path for layer in fused for v in (layer.cudnn_spec, layer.cudnn_platform)}
        for variable in model.variables:
            if variable.path in skip or variable.path.endswith((f"/{SPEC_VARIABLE}", f"/{PLATFORM_VARIABLE}")):
                continue
            self._values[variable.path] = variable
            self.shapes[variable.path] = tuple(int(d) for d in variable.shape)
            self.dtypes[variable.path] = np.dtype(variable.dtype).name

    def get(self, name: str) -> np.ndarray:
        return np.asarray(self._values[name].numpy())

    def files(self) -> List[str]:
        return [self.path] if self.path else []

    @classmethod
    def from_file(cls, path: str) -> "KerasModelSource":
        """A ``.keras`` file saved from a model with fused layers, or stock Keras LSTM / GRU / Bidirectional layers
        (seen as the fused layers :func:`cudnn_port.stock_keras.rewrite` makes of them)."""
        from ..stock_keras import rewrite

        model = load_keras_file(path)
        return cls(rewrite(model, strict=False), os.path.abspath(path), original=model)

    def nothing_found(self) -> str:
        others = "; ".join(f"{r['layer']} ({r['type']}): {r['why']}" for r in self.stock_layers)
        return (f"{self.prefix} holds no layer whose math cuDNN computes (a stock LSTM / GRU / Bidirectional, or "
                f"cudnn_port's CudnnLSTM / CudnnGRU){f' ({others})' if others else ''}, so there is nothing to "
                "convert; export it with Keras' own model.export")

    def describe(self, name: str) -> str:
        spec = self.specs[name]
        kind = "CudnnLSTM" if spec.mode == "lstm" else "CudnnGRU"
        return f"fused layer {self._layers[name]} ({kind}), spec stated by the layer"
