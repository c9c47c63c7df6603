"""Judges that read Keras weights by Keras' own documented rules, not through the reader or rewrite an artifact
came through.

- A Keras 2 ``.h5``'s stacks (:func:`stack_from_file`) and the whole model rebuilt from it in Keras 3
  (``OUT/keras/model.keras``, :func:`rebuilt_model_row`, written by :mod:`cudnn_port.exports.keras_rebuild`): the
  file's arrays converted by Keras 2's own rule for loading CuDNNLSTM / CuDNNGRU weights into LSTM /
  GRU(reset_after=True) (tf.keras ``saving/hdf5_format.py``, ``_convert_rnn_weights``: each gate's input kernel
  ``k.T.reshape(k.shape, order="F")``, each gate's recurrent kernel ``k.T``, the LSTM's two biases summed, the GRU's
  reshaped to ``[2, 3H]``). The rebuilt model is run against a second copy of it holding those weights. Shares
  nothing with :mod:`cudnn_port.readers.keras_h5` or :mod:`cudnn_port.targets.keras`. With the source gone the
  rebuilt model's row says so and is unjudged (verify fails it unless the user accepts unjudged rows).
- A stock Keras layer's stack (:func:`stock_stack`): its own kernels by Keras' LSTM / GRU math
  (:func:`keras_canonical`), not the buffer :mod:`cudnn_port.stock_keras` packed.
"""
import os
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple
import json

import numpy as np

from .parity import compare, failed_row, model_feeds
from .stock import model_outputs
from ..canonical import CanonicalRNN, LayerParams
from ..deps import import_tf
from ..errors import CudnnPortError
from ..readers.h5_guard import check_h5
from ..readers.keras_h5 import CUDNN_CLASSES, h5_text, layer_classes
from ..readers.keras_model import load_model_file

if TYPE_CHECKING:
    import keras

    from ..canonical import CanonicalRNN
    from ..layout import RNNSpec
    from ..manifest import Manifest

LABEL = "keras/model.keras (Keras 3 rebuild of the whole model)"
RECURRENT = {"LSTM": 4, "GRU": 3}


def keras2_rule(kind: str, kernel: np.ndarray, recurrent: np.ndarray, bias: np.ndarray) -> List[np.ndarray]:
    """Keras 2's conversion of one CuDNNLSTM / CuDNNGRU layer's saved weights to LSTM / GRU(reset_after=True)."""
    gates = RECURRENT[kind]
    kernel = np.hstack([k.T.reshape(k.shape, order="F") for k in np.hsplit(kernel, gates)])
    recurrent = np.hstack([k.T for k in np.hsplit(recurrent, gates)])
    bias = bias[:bias.size // 2] + bias[bias.size // 2:] if kind == "LSTM" else bias.reshape(2, -1)
    return [kernel, recurrent, bias]


def rebuilt_model_row(manifest: "Manifest", out: str, source_unchanged: bool, seed: int, atol: float,
                      rtol: float) -> Dict[str, Any]:
    """The verify row of OUT/keras/model.keras for a Keras 2 ``.h5`` source (see the module docstring)."""
    source = manifest["source"].get("checkpoint", "")
    if not source_unchanged or not os.path.isfile(source):
        return {"artifact": LABEL, "passed": None, "max_abs": None, "max_rel": None, "unjudged": True,
                "note": "not judged: the source .h5 is gone or changed, and this row's judge reads it"}
    path = os.path.join(out, manifest.model_artifacts["keras"])
    try:
        rebuilt, judge = load_model_file(path), load_model_file(path)
        _source_weights(judge, source)
        names = [t.name.split(":")[0] for t in rebuilt.inputs]
        want = None
        for empty_row in (True, False):  # a row of only padding where the judge runs one to finite outputs
            feeds = _feeds(rebuilt, names, seed, empty_row)
            values = [feeds[n] for n in names]
            x = values if len(values) > 1 else values[0]
            try:
                want = model_outputs(judge(x, training=False))
            except Exception:  # noqa: BLE001 (without that row, a judge that raises is the row's failure)
                if not empty_row:
                    raise
                continue
            if not empty_row or all(np.all(np.isfinite(w)) for w in want):
                break
        got = model_outputs(rebuilt(x, training=False))
    except Exception as e:  # noqa: BLE001 (a model that does not load or run is a failed check)
        return failed_row(LABEL, e)
    row = compare(LABEL, got, want, atol, rtol)
    return dict(row, note="against the same model with its recurrent weights read from the source .h5 by Keras 2's "
                          "own CuDNN-to-LSTM/GRU rule")


def _feeds(model, names, seed, empty_row=True):
    """The whole-model rows' draw (:func:`cudnn_port.judging.parity.model_feeds`) for the model's own input
    shapes."""
    tf = import_tf()
    return model_feeds(model, names, [tf.TensorSpec(t.shape, t.dtype) for t in model.inputs], seed, empty_row)


def _source_weights(model, source: str) -> None:
    """Give each LSTM / GRU (or Bidirectional of one) of ``model`` the weights its layer of the same name holds in
    the source file (a nested model's layers too): a CuDNNLSTM / CuDNNGRU's converted by :func:`keras2_rule`, a
    plain LSTM / GRU's as they are. A recurrent layer the file holds no weights for fails the row (it would
    otherwise judge the rebuilt weights by themselves)."""
    # lazy: h5py, loaded on first use (import cudnn_port stays light)
    import h5py

    with h5py.File(source, "r") as f:
        check_h5(f, source)
        config = f.attrs.get("model_config")
        classes = layer_classes(json.loads(h5_text(config))) if config is not None else {}
        root = f["model_weights"] if "model_weights" in f else f
        owned = {}  # layer name -> its arrays, in the order Keras saved them (nested models' layers included)
        for group_name in root:
            group = root[group_name]
            for name in (h5_text(n) for n in group.attrs.get("weight_names", [])):
                owned.setdefault(name.split("/")[0], []).append(np.asarray(group[name][()]))
        for layer in _layers(model):
            inner = [layer.forward_layer, layer.backward_layer] if hasattr(layer, "forward_layer") else [layer]
            kind = type(inner[0]).__name__
            if kind not in RECURRENT:
                continue
            arrays = owned.get(layer.name) or []
            cudnn = classes.get(layer.name) in CUDNN_CLASSES
            per = len(arrays) // len(inner)  # kernel, recurrent kernel and bias (a plain use_bias=False layer: none)
            if not arrays or per * len(inner) != len(arrays) or per not in ((3,) if cudnn else (2, 3)):
                raise CudnnPortError(f"layer {layer.name}: the source holds no weights for it")
            layer.set_weights([w for d in range(len(inner)) for w in (
                keras2_rule(kind, *arrays[3 * d:3 * d + 3]) if cudnn else arrays[per * d:per * (d + 1)])])


def _layers(model):
    for layer in getattr(model, "layers", None) or []:
        if getattr(layer, "layers", None) and not hasattr(layer, "forward_layer"):
            yield from _layers(layer)
        else:
            yield layer


# Keras gate blocks (i f c o / z r h) in cuDNN order (i f c o / r z h)
KERAS_TO_CUDNN = {"LSTM": [0, 1, 2, 3], "GRU": [1, 0, 2], "SimpleRNN": [0]}
KERAS_KIND = {"lstm": "LSTM", "gru": "GRU", "rnn_tanh": "SimpleRNN", "rnn_relu": "SimpleRNN"}


def judge_stack(path: str, variable: str, spec: "RNNSpec") -> "Tuple[CanonicalRNN, str]":
    """verify's per-stack judge of a Keras 2 ``.h5`` (the registry's ``judge``): :func:`stack_from_file`, and the
    judge's words."""
    words = "the source .h5's arrays, by Keras 2's own weight rule (not the reader)"
    return stack_from_file(path, variable, spec), words


def stack_from_file(source: str, variable: str, spec: "RNNSpec") -> "CanonicalRNN":
    """The stack ``variable`` (``{layer}/opaque_kernel``) of a Keras 2 ``.h5`` as the reference takes it (a
    :class:`~cudnn_port.canonical.CanonicalRNN`, cuDNN's gate order), read from the file's own arrays by Keras 2's
    rule (:func:`keras2_rule`) and Keras' LSTM / GRU math (``x @ kernel + h @ recurrent_kernel + bias``, gate blocks
    i f c o / z r h along the columns; GRU bias rows: input, recurrent), not through the reader."""
    # lazy: h5py, loaded on first use (import cudnn_port stays light)
    import h5py

    layer = variable.rsplit("/", 1)[0]
    with h5py.File(source, "r") as f:
        check_h5(f, source)
        root = f["model_weights"] if "model_weights" in f else f
        group = root[layer]
        names = [h5_text(n) for n in group.attrs["weight_names"]]
        arrays = [np.asarray(group[n][()], np.float64) for n in names]
    held = file_spec(layer, names, arrays)
    differ = [f"{k} {held[k]} (the manifest's {getattr(spec, k)})" for k in sorted(held) if getattr(spec, k) != held[k]]
    if differ:
        unread = [n.split("/", 1)[-1].replace("/", " ") for n in names[3 * spec.num_dirs:]]  # no path-like slash
        raise CudnnPortError(f"layer {layer}: the file holds {', '.join(differ)}" + (
            f"; arrays not read by the manifest's spec: {', '.join(unread)}" if unread else ""))
    kind = KERAS_KIND[spec.mode]
    return keras_canonical(spec, [keras2_rule(kind, *arrays[3 * d:3 * d + 3]) for d in range(spec.num_dirs)])


def file_spec(layer: str, names: Sequence[str], arrays: Sequence[np.ndarray]) -> Dict[str, Any]:
    """What a Keras 2 CuDNNLSTM / CuDNNGRU layer's own arrays say of its stack, by Keras 2's saving rule and not
    the reader's: three arrays (kernel [I, G*H], recurrent kernel [H, G*H], bias [2*G*H]) per direction, all of
    them read (a Bidirectional wrapper's six: two directions), G = 4 gates for an LSTM and 3 for a GRU, one layer."""
    if not arrays or len(arrays) % 3 or len(arrays) // 3 > 2:
        raise CudnnPortError(f"layer {layer}: {len(arrays)} arrays ({', '.join(names)}), not 3 per direction of a "
                             "CuDNNLSTM / CuDNNGRU")
    kernel, recurrent = arrays[0], arrays[1]
    units = recurrent.shape[0]
    gates = recurrent.shape[1] // max(units, 1)
    if gates not in (3, 4) or any(a.shape != b.shape for a, b in zip(arrays[3:], arrays[:3])):
        raise CudnnPortError(f"layer {layer}: arrays {[list(a.shape) for a in arrays]} are not a CuDNNLSTM / "
                             "CuDNNGRU's")
    return {"mode": "lstm" if gates == 4 else "gru", "num_layers": 1, "num_units": units,
            "input_size": kernel.shape[0], "bidirectional": len(arrays) == 6}


def keras_canonical(spec: "RNNSpec", directions: Sequence[Sequence[np.ndarray]]) -> "CanonicalRNN":
    """A :class:`~cudnn_port.canonical.CanonicalRNN` (cuDNN's gate order) of Keras LSTM / GRU(reset_after=True)
    weights ``[(kernel, recurrent_kernel, bias)]`` per direction, by Keras' math: ``x @ kernel + h @
    recurrent_kernel + bias``, gate blocks i f c o / z r h along the columns, a GRU's bias rows input then
    recurrent; a SimpleRNN's one block and one bias."""
    kind = KERAS_KIND[spec.mode]
    params, H, order = [], spec.num_units, KERAS_TO_CUDNN[kind]
    for kernel, recurrent, bias in directions:
        kernel, recurrent, bias = (np.asarray(a, np.float64) for a in (kernel, recurrent, bias))
        blocks = [slice(g * H, (g + 1) * H) for g in order]
        W = np.stack([kernel[:, b].T for b in blocks])
        R = np.stack([recurrent[:, b].T for b in blocks])
        one_row = kind != "GRU" or bias.ndim == 1  # LSTM, SimpleRNN, GRU(reset_after=False): one bias
        b_W = np.stack([(bias if one_row else bias[0])[b] for b in blocks])
        b_R = np.zeros_like(b_W) if one_row else np.stack([bias[1][b] for b in blocks])
        params.append(LayerParams(W, R, b_W, b_R))
    return CanonicalRNN(spec, params)


def stock_stack(model: "keras.Model", layer_path: str, spec: "RNNSpec", cell: Optional[Sequence[int]] = None,
                direction: Optional[str] = None) -> "CanonicalRNN":
    """The stack of stock layer ``layer_path`` (``outer/inner`` for nested models) of Keras model ``model`` as the
    reference takes it, read from the layer's own variables by Keras' math (:func:`keras_canonical`), not through
    the rewrite that built the fused layer; ``cell``: [k] for cell k of an ``RNN(StackedRNNCells(...))`` in Keras'
    own list, [k, j] for cell j of the StackedRNNCells that is cell k; of the ``direction`` (``forward`` /
    ``backward``) layer of a ``Bidirectional`` of one."""
    layer = model
    for name in layer_path.split("/"):  # a TimeDistributed's child is the layer it wraps: td/lstm
        inner = layer
        while type(inner).__name__ == "TimeDistributed":  # nested ones: the layer inside them all
            inner = inner.layer
        children = [inner] if inner is not layer else layer.layers
        layer = next(inner for inner in children if inner.name == name)
    while type(layer).__name__ == "TimeDistributed":  # the layer it wraps (a path that ends at the wrapper)
        layer = layer.layer
    rnns = [layer.forward_layer, layer.backward_layer] if hasattr(layer, "forward_layer") else [layer]
    if direction is not None:
        rnns = [layer.forward_layer if direction == "forward" else layer.backward_layer]
    directions = []
    for rnn in rnns:
        stock = rnn.cell
        for k in cell or []:
            stock = stock.cells[k]
        kernel, recurrent = stock.kernel.numpy(), stock.recurrent_kernel.numpy()
        bias = stock.bias.numpy() if stock.bias is not None else \
            np.zeros((2, recurrent.shape[1]) if spec.mode == "gru" and spec.reset_after else recurrent.shape[1])
        directions.append([kernel, recurrent, bias])
    return keras_canonical(spec, directions)
