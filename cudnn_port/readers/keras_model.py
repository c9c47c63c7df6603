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

if TYPE_CHECKING:
    import keras


def load_keras_file(path) -> "keras.Model":
    """Load a ``.keras`` file with cudnn_port's layers known to Keras."""
    require_file(path, ".keras file")
    if os.path.getsize(path) == 0 or not zipfile.is_zipfile(path):
        raise CudnnPortError(f"{path} is empty or not a zip archive, so not a complete .keras file; save the model "
                             "again with model.save(path)")
    import keras

    from .. import layers  # noqa: F401  (registers CudnnLSTM / CudnnGRU)

    try:
        return keras.saving.load_model(path, compile=False)
    except Exception as e:
        raise CudnnPortError(f"cannot load {path} as a Keras model ({reason(e)}); is it a complete .keras "
                             "file?") from None


class KerasModelSource(Source):
    default_style = "keras"
    format = "Keras 3 model"
    names_note = "Keras variable paths"
    whole_model = True  # converts as a whole model (cudnn_port.model_export), not buffer by buffer

    def __init__(self, model, path=None):
        from ..layers import fused_layers

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

    def get(self, name) -> np.ndarray:
        return np.asarray(self._values[name].numpy())

    def files(self) -> List[str]:
        return [self.path] if self.path else []

    @classmethod
    def from_file(cls, path) -> "KerasModelSource":
        """A ``.keras`` file saved from a model with fused layers."""
        return cls(load_keras_file(path), os.path.abspath(path))

    def nothing_found(self) -> str:
        return (f"{self.prefix} holds no cudnn_port fused layer (CudnnLSTM / CudnnGRU), so there is nothing to "
                "convert; export it with Keras' own model.export")

    def describe(self, name) -> str:
        spec = self.specs[name]
        kind = "CudnnLSTM" if spec.mode == "lstm" else "CudnnGRU"
        return f"fused layer {self._layers[name]} ({kind}), spec stated by the layer"
