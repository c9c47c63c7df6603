"""A Keras model file's config checked against the weights it stores, before Keras builds anything from it.

Keras builds every layer from its config (allocating and initialising its weights: an ``Orthogonal`` recurrent kernel
is a QR of the whole matrix) before it reads one stored weight. A 36 KB ``.keras`` whose inner LSTM declared
``units: 8192`` while storing weights for 6 units took ``inspect`` past 180 s and 4.4 GiB. Here, from the config alone,
each layer of a known class gives the fewest weights its declared sizes make Keras create (:func:`least_weights`:
a recurrent layer's recurrent kernel, ``units`` x gates x ``units``; an ``Embedding``'s table; a convolution's
filters), and a file whose layers declare more than its weights file stores (:data:`SLACK` times, beyond
:data:`FREE`) is refused in one line naming the layer that declares the most. Keras stores every weight it builds,
so an honest file always passes; a class not listed adds nothing.
"""
import json
from typing import Any, Iterator, Optional, Tuple

from ..errors import CudnnPortError, short

GATES = {"LSTM": 4, "LSTMCell": 4, "CuDNNLSTM": 4, "CudnnLSTM": 4, "GRU": 3, "GRUCell": 3, "CuDNNGRU": 3,
         "CudnnGRU": 3, "SimpleRNN": 1, "SimpleRNNCell": 1}
CONV_RECURRENT = {"ConvLSTM1D": 4, "ConvLSTM2D": 4, "ConvLSTM3D": 4}
CONVOLUTIONS = ("Conv1D", "Conv2D", "Conv3D", "Conv1DTranspose", "Conv2DTranspose", "Conv3DTranspose")
SLACK = 2  # the weights a config declares may be at most this many times those stored ...
FREE = 1 << 22  # ... plus this many (16 MiB of float32: a small model's sizes are never refused)


def _size(value: Any) -> Optional[int]:
    """A positive whole number from a config (an int, or a float of one), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer() and value > 0:
        return int(value)
    return value if isinstance(value, int) and value > 0 else None


def _kernel(config: dict) -> int:
    """The product of a convolution's ``kernel_size`` (an int or a list of them); 1 where it states none."""
    size = config.get("kernel_size", 1)
    sizes = size if isinstance(size, (list, tuple)) else [size]
    product = 1
    for s in sizes:
        product *= _size(s) or 1
    return product


def least_weights(class_name: str, config: dict) -> int:
    """The fewest weights (elements) a layer of ``class_name`` with ``config`` creates when Keras builds it, from
    sizes its config states alone (its input size is not known here); 0 for a class not known."""
    units = _size(config.get("units"))
    if class_name in GATES and units:
        layers = _size(config.get("num_layers")) or 1  # cudnn_port's fused layers: each layer and direction
        directions = 2 if config.get("bidirectional") is True else 1
        return GATES[class_name] * units * units * layers * directions
    filters = _size(config.get("filters"))
    if class_name in CONV_RECURRENT and filters:
        return CONV_RECURRENT[class_name] * filters * filters * _kernel(config)
    if class_name in CONVOLUTIONS and filters:
        return filters * _kernel(config)
    if class_name == "Embedding":
        return (_size(config.get("input_dim")) or 0) * (_size(config.get("output_dim")) or 0)
    if class_name == "Dense" and units:
        return units
    return 0


def _layers(node: Any, depth: int = 0) -> Iterator[Tuple[str, str, dict]]:
    """(class name, layer name, config) of every object in a config tree (nested models, wrapped layers, cells)."""
    if depth > 200:  # Keras' own configs nest a few levels; a deeper one is crafted
        raise CudnnPortError("its config nests more than 200 levels deep")
    if isinstance(node, dict):
        config = node.get("config")
        if isinstance(node.get("class_name"), str) and isinstance(config, dict):
            yield node["class_name"], str(config.get("name", "?")), config
        for value in node.values():
            yield from _layers(value, depth + 1)
    elif isinstance(node, list):
        for value in node:
            yield from _layers(value, depth + 1)


def check_config_sizes(config: Any, stored: int, path: str, weights: str) -> None:
    """Refuse ``path`` (one line) if the layers its ``config`` (parsed JSON, or its text) declares would make Keras
    create far more weights than ``stored``, the count of elements its weights file ``weights`` holds."""
    if isinstance(config, (str, bytes)):
        try:
            config = json.loads(config)
        except (ValueError, RecursionError):
            return  # not JSON: Keras refuses it in its own words, before building anything
    try:
        found = [(least_weights(c, cfg), c, name) for c, name, cfg in _layers(config)]
    except CudnnPortError as e:
        raise CudnnPortError(f"{path}: {e}; the file is damaged or crafted, so it is not read") from None
    total = sum(n for n, _, _ in found)
    if total > SLACK * stored + FREE:
        n, class_name, name = max(found)
        raise CudnnPortError(f"{path}: its config declares layers of at least {total} weights ({class_name} "
                             f"{short(name)!r} alone {n}), but {weights} stores {stored}; the file is damaged or "
                             "crafted to exhaust memory, so it is not loaded")
