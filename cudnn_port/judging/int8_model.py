"""A whole model's int8 ONNX judged: its outputs against the float32 judge's, within a tolerance set by the same
model with each int8 LSTM stack rounded as an exact int8 implementation rounds (:func:`int8_model_row`). The
stacks of that model are read from the stock layers' own variables or through the cuDNN API's layout, never from
the buffer the rewrite packed, so that the tolerance does not widen with the error it judges."""
import os
from typing import TYPE_CHECKING, Any, Dict, List

import numpy as np

from ..deps import import_tf
from ..exports.runners import onnx_session
from ..layer_paths import judged_by
from ..keras_models.model_inputs import as_model_takes
from ..keras_models.precision import float32_policy
from ..keras_models.stock_fused import DIRECTIONS
from ..keras_models.stock_keras import rewrite, unwrapped
from . import cudnn_api
from .int8 import FLOOR_MAX, FLOOR_MEAN, K_MAX, K_MEAN, LSTM_SETTINGS, ideal_int8_forward, infer_settings, quantized
from .keras_weights import stock_stack
from .parity import compare, failed_row
from .stock import ReferenceStack, model_outputs

if TYPE_CHECKING:
    from ..manifest import Manifest


def int8_model_row(out: str, manifest: "Manifest", names: List[str], feeds: Dict[str, np.ndarray],
                   want: List[np.ndarray], key: str, model: Any, judged: List[str]) -> Dict[str, Any]:
    """The whole model's int8 ONNX against the fp32 judge's outputs ``want``, with the tolerance of the stacks' int8
    rows (:mod:`cudnn_port.judging.int8`) taken over the whole model: at most 3x the max and 1.5x the mean distance
    from ``want`` of the same model with each int8 LSTM stack computed as an exact int8 implementation rounds
    (:func:`~cudnn_port.judging.int8.ideal_int8_forward`), plus small floors. Its cost on the task is the task's
    row, where OUT holds a task."""
    # lazy: onnx, loaded on first use (import cudnn_port stays light)
    import onnx

    name = "onnx int8 (onnxruntime)"
    path = os.path.join(out, manifest.model_artifacts[key])
    try:
        session = onnx_session(path)
        got = session.run([f"output_{i}" for i in range(len(want))], {n: feeds[n] for n in names})
        ideal = _ideal_int8_model(model, [feeds[n] for n in judged],
                                  dict(LSTM_SETTINGS, **infer_settings(onnx.load(path))))
    except Exception as e:  # noqa: BLE001
        return failed_row(name, e)
    row = compare(name, got, want, np.inf, 0.0)
    errors = [np.abs(np.asarray(g, np.float64) - w) for g, w in zip(got, want)]
    scales = [np.abs(np.asarray(i, np.float64) - w) for i, w in zip(ideal, want)]
    err_max, err_mean = max(float(e.max()) for e in errors), float(np.mean([e.mean() for e in errors]))
    limit_max = K_MAX * max(float(s.max()) for s in scales) + FLOOR_MAX
    limit_mean = K_MEAN * float(np.mean([s.mean() for s in scales])) + FLOOR_MEAN
    passed = bool(np.isfinite(err_max) and err_max <= limit_max and err_mean <= limit_mean)
    return dict(row, passed=passed, max_rel=None, tolerance=limit_max,
                note=f"int8 tolerance: max <= {limit_max:.1e}, mean <= {limit_mean:.1e} (3x / 1.5x the model with "
                     f"exact int8 rounding; error max {err_max:.1e}, mean {err_mean:.1e})")


class _Int8Stack:
    """One fused LSTM stack as an exact int8 implementation computes it (float64), called like the fused layer's
    paths: ``(x, lengths, h0, c0) -> (outputs, h_n, c_n)``."""

    def __init__(self, canon, settings):
        self.canon, self.settings = canon, settings

    def __call__(self, x, lengths, h0, c0):
        tf = import_tf()

        def run(x, lengths, h0, c0):
            return [a.astype(np.float32) for a in ideal_int8_forward(self.canon, x, lengths, h0, c0,
                                                                     **self.settings)]

        y, h, c = tf.numpy_function(run, [x, lengths, h0, c0], [tf.float32] * 3)
        return y, h, c


def _ideal_int8_model(model, inputs, settings):
    """``model``'s outputs with each stack int8 quantizes (:func:`~cudnn_port.judging.int8.quantized`) rounded as
    int8 does and every other fused stack in the float64 reference; ordinary layers are Keras' own. Each stack's
    weights come from the stock layer's own variables (:func:`cudnn_port.judging.keras_weights.stock_stack`) or a
    fused layer's buffer read through the cuDNN API's layout (:mod:`cudnn_port.judging.cudnn_api`), not from the
    buffer the rewrite packed, so that an error of the rewrite cannot widen the tolerance that judges it."""
    with float32_policy():
        fused = rewrite(model, sized=False)  # Keras' own Dense, TimeDistributed...: the judge shares no sized_layers
        judges = {}
        for path, (cell, direction), layer in _fused_by_path(fused):
            spec = layer.spec
            canon = stock_stack(model, path, spec, cell, direction) if path is not None else \
                cudnn_api.canonical(spec, layer.opaque_kernel.numpy())
            judges[id(layer)] = _Int8Stack(canon, {k: settings[k] for k in ("per_channel", "reduce_range")}) \
                if quantized(spec) else ReferenceStack(canon)
        with judged_by(judges):
            return model_outputs(fused(as_model_takes(fused, inputs), training=False))


def _cells_fused(stack, path=()):
    """([k] or [k, j, ...], fused layer) of each cell of a StackedAdapter, nested stacks included."""
    # lazy: Keras, loaded on first use (import cudnn_port stays light)
    from ..keras_models.stock_adapter import StackedAdapter

    for k, adapter in enumerate(stack.adapters):
        if isinstance(adapter, StackedAdapter):
            yield from _cells_fused(adapter, path + (k,))
        else:
            yield list(path + (k,)), adapter.fused


def _fused_by_path(model, prefix=""):
    """(the stock layer's ``outer/inner`` path, or None for a layer that was fused already, (the cell's index in an
    ``RNN(StackedRNNCells(...))``, the direction of a ``Bidirectional`` of one; each None otherwise), fused layer) of
    each fused layer in ``model`` (a rewritten model: a stock layer's adapter is named as the layer)."""
    # lazy: Keras, loaded on first use (import cudnn_port stays light)
    from ..layers import CudnnRNN
    from ..keras_models.stock_adapter import StackedAdapter, StackedPairAdapter, StockAdapter

    for layer in getattr(model, "layers", None) or []:
        path, inner = prefix + layer.name, unwrapped(layer)  # Keras' own TimeDistributed around a stack: its name
        wrapped, layer = inner is not layer, inner
        if wrapped and not isinstance(layer, (CudnnRNN, StockAdapter, StackedAdapter, StackedPairAdapter)):
            path = f"{path}/{layer.name}"  # a model inside: td/model/..., as the judge's stock_stack walks it
        if isinstance(layer, StackedPairAdapter):  # each direction a stack of cells, or one plain layer's
            yield from ((path, (cell, way), fused)
                        for way, half in zip(DIRECTIONS, (layer.forward, layer.backward))
                        for cell, fused in (_cells_fused(half) if isinstance(half, StackedAdapter) else
                                            [(None, half.fused)]))
        elif isinstance(layer, StackedAdapter):
            yield from ((path, (cell, None), fused) for cell, fused in _cells_fused(layer))
        elif isinstance(layer, StockAdapter):
            yield path, (None, None), layer.fused
        elif isinstance(layer, CudnnRNN):
            yield None, (None, None), layer
        elif getattr(layer, "layers", None):
            yield from _fused_by_path(layer, f"{path}/")
