"""Judges that read Keras weights by Keras' own documented rules, not through the reader or rewrite an artifact
came through.

- A Keras 2 ``.h5``'s stacks (:func:`stack_from_file`): the file's arrays converted by Keras 2's own rule for
  loading CuDNNLSTM / CuDNNGRU weights into LSTM / GRU(reset_after=True) (tf.keras ``saving/hdf5_format.py``,
  ``_convert_rnn_weights``: each gate's input kernel ``k.T.reshape(k.shape, order="F")``, each gate's recurrent kernel
  ``k.T``, the LSTM's two biases summed, the GRU's reshaped to ``[2, 3H]``; :func:`keras2_rule`), which the whole
  model's judge (:mod:`cudnn_port.judging.keras2_model`) uses too. Shares nothing with
  :mod:`cudnn_port.readers.keras_h5` or :mod:`cudnn_port.targets.keras`.
- A stock Keras layer's stack (:func:`stock_stack`): its own kernels by Keras' LSTM / GRU math
  (:func:`keras_canonical`), not the buffer :mod:`cudnn_port.keras_models.stock_keras` packed.
"""
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..canonical import CanonicalRNN, LayerParams
from ..errors import CudnnPortError
from ..readers.h5_guard import check_h5
from ..readers.keras_h5 import h5_text

if TYPE_CHECKING:
    import keras

    from ..canonical import CanonicalRNN
    from ..layout import RNNSpec

RECURRENT = {"LSTM": 4, "GRU": 3}


def keras2_rule(kind: str, kernel: np.ndarray, recurrent: np.ndarray, bias: np.ndarray) -> List[np.ndarray]:
    """Keras 2's conversion of one CuDNNLSTM / CuDNNGRU layer's saved weights to LSTM / GRU(reset_after=True)."""
    gates = RECURRENT[kind]
    kernel = np.hstack([k.T.reshape(k.shape, order="F") for k in np.hsplit(kernel, gates)])
    recurrent = np.hstack([k.T for k in np.hsplit(recurrent, gates)])
    bias = bias[:bias.size // 2] + bias[bias.size // 2:] if kind == "LSTM" else bias.reshape(2, -1)
    return [kernel, recurrent, bias]


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
