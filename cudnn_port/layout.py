"""The cuDNN opaque parameter buffer: its spec, its layout, and packing to and from the canonical model.

Layout (G = 4 gates for LSTM, 3 for GRU; D = 1 or 2 directions; pseudo-layer p = layer * D + direction)::

    for p in pseudo-layers:                      # weights of every pseudo-layer first ...
        W_0 .. W_{G-1}     each [H, I_l]  row-major, I_0 = I, I_l = D * H for l >= 1
        R_0 .. R_{G-1}     each [H, H]    row-major
    for p in pseudo-layers:                      # ... then the biases of every pseudo-layer
        b_W_0 .. b_W_{G-1} each [H]
        b_R_0 .. b_R_{G-1} each [H]
    size = sum_p G * H * (I_l + H + 2)           (no padding)

Gates are in cuDNN order: LSTM i, f, c, o; GRU r, z, h (``gates.CUDNN_ORDER``).

Evidence (public sources, see conventions.md §1): TensorFlow ``core/kernels/cudnn_rnn_ops.cc`` (shapes
``[num_units, width]``, width = input_size for the first layer and 2 * num_units after it in a bidirectional
stack); Lingvo's GPU test (buffer == concat(all weights, all biases) for uni- and bidirectional stacks);
MXNet gluon ``rnn_layer`` (weights of all layers, then biases, handed to cuDNN as is); Keras'
``_standardize_cudnn_weights`` (single layer: concat(weights + biases)); a real R-Net checkpoint
(``cudnn_gru/opaque_kernel`` of 86184 = 3*76*(300+76) + 6*76 elements).

UNVERIFIED ON GPU: the single-layer layout is confirmed by the sources above; the offsets of layers >= 1 and
of the backward direction under cuDNN 8/9 are documented but have not yet been checked against real cuDNN
output in this project's golden fixtures. Treat them as a hypothesis until those fixtures exist.

Not supported (``UnsupportedError``): LSTM projection (``num_proj``, linLayerID 8) and
``input_mode=skip_input``; both change the region list and are rare in checkpoints.

The region list (:meth:`RNNSpec.regions`) is the single encoding of this layout: :meth:`RNNSpec.param_count`,
:func:`unpack` and :func:`pack` all derive from it.

>>> spec = RNNSpec("gru", num_layers=1, num_units=76, input_size=300)
>>> spec.param_count
86184
"""
from dataclasses import dataclass, asdict

import numpy as np

from .canonical import CanonicalRNN, LayerParams
from .errors import CudnnPortError, UnsupportedError

MODES = {"lstm": 4, "gru": 3}
FLOAT_DTYPES = ("float16", "float32", "float64")
KINDS = ("W", "R", "b_W", "b_R")


@dataclass(frozen=True)
class Region:
    """One gate block of the buffer: ``kind`` in W, R, b_W, b_R of gate ``gate`` (cuDNN index) of ``pseudo``."""

    pseudo: int
    kind: str
    gate: int
    offset: int
    shape: tuple

    @property
    def size(self):
        return int(np.prod(self.shape))


@dataclass(frozen=True)
class RNNSpec:
    """What a cuDNN RNN stack is: enough to lay out its buffer.

    mode: ``"lstm"`` or ``"gru"``; num_layers: L >= 1; num_units: H; input_size: I (width of layer 0's input);
    bidirectional: D = 2 when true; dtype: element type of the buffer.
    """

    mode: str
    num_layers: int
    num_units: int
    input_size: int
    bidirectional: bool = False
    dtype: str = "float32"
    num_proj: int = 0
    input_mode: str = "linear_input"

    def __post_init__(self):
        if self.mode not in MODES:
            raise CudnnPortError(f"Received mode {self.mode!r}, expected one of {sorted(MODES)}")
        for name in ("num_layers", "num_units", "input_size"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise CudnnPortError(f"Received {name}={value!r}, expected a positive integer")
        if self.dtype not in FLOAT_DTYPES:
            raise CudnnPortError(f"Received dtype {self.dtype!r}, expected one of {FLOAT_DTYPES}")
        if self.num_proj:
            raise UnsupportedError(
                "LSTM projection (num_proj) is not supported: its buffer adds a [P, H] region per pseudo-layer "
                "that no canonical target here can hold; convert a stack without projection")
        if self.input_mode != "linear_input":
            raise UnsupportedError(
                f"input_mode={self.input_mode!r} is not supported: it drops layer 0's input weights "
                "(x is added to each gate directly); retrain with input_mode='linear_input'")

    @property
    def num_gates(self):
        return MODES[self.mode]

    @property
    def num_dirs(self):
        return 2 if self.bidirectional else 1

    @property
    def num_pseudo_layers(self):
        return self.num_layers * self.num_dirs

    def layer_input_size(self, layer):
        """I_l: the width of layer ``layer``'s input."""
        return self.input_size if layer == 0 else self.num_dirs * self.num_units

    def regions(self):
        """Every block of the buffer, in buffer order (see the module docstring)."""
        G, H = self.num_gates, self.num_units
        out, offset = [], 0

        def add(p, kind, gate, shape):
            nonlocal offset
            out.append(Region(p, kind, gate, offset, shape))
            offset += int(np.prod(shape))

        for p in range(self.num_pseudo_layers):
            width = self.layer_input_size(p // self.num_dirs)
            for g in range(G):
                add(p, "W", g, (H, width))
            for g in range(G):
                add(p, "R", g, (H, H))
        for p in range(self.num_pseudo_layers):
            for kind in ("b_W", "b_R"):
                for g in range(G):
                    add(p, kind, g, (H,))
        return out

    @property
    def param_count(self):
        """Elements in the buffer (never bytes)."""
        G, H, D = self.num_gates, self.num_units, self.num_dirs
        return sum(G * H * (self.layer_input_size(p // D) + H + 2) for p in range(self.num_pseudo_layers))

    def to_dict(self):
        d = asdict(self)
        del d["num_proj"], d["input_mode"]
        return d

    def flags(self):
        """The CLI flags that select this spec."""
        return (f"--mode {self.mode} --num-layers {self.num_layers} --num-units {self.num_units} "
                f"--input-size {self.input_size}" + (" --bidirectional" if self.bidirectional else ""))

    def describe(self):
        direction = "bidirectional" if self.bidirectional else "unidirectional"
        return (f"{self.num_layers}-layer {direction} {self.mode.upper()}, input {self.input_size}, "
                f"hidden {self.num_units}, {self.dtype}")


def _check_blob(spec, blob):
    blob = np.asarray(blob)
    if blob.ndim != 1:
        raise CudnnPortError(f"Received a buffer of shape {blob.shape}, expected a flat vector; pass blob.reshape(-1)")
    if blob.size != spec.param_count:
        raise CudnnPortError(
            f"Received a buffer of {blob.size} elements, expected {spec.param_count} for a {spec.describe()}; "
            "check the spec (cudnn-port inspect lists the specs that fit)")
    return blob


def _kind_spans(spec):
    """(pseudo, kind) -> (offset, [G, *shape]): the G gate blocks of one kind are adjacent in the buffer."""
    spans = {}
    for r in spec.regions():
        key = (r.pseudo, r.kind)
        if key not in spans:
            spans[key] = (r.offset, (spec.num_gates,) + r.shape)
    return spans


def unpack(spec, blob):
    """Opaque buffer ``[param_count]`` -> :class:`CanonicalRNN` in cuDNN gate order.

    The canonical arrays are views into ``blob`` (no copy): W ``[G, H, I_l]``, R ``[G, H, H]``,
    b_W and b_R ``[G, H]`` per pseudo-layer.

    >>> spec = RNNSpec("lstm", 1, 2, 3)
    >>> canon = unpack(spec, np.arange(spec.param_count, dtype="float32"))
    >>> canon.layers[0].W.shape, float(canon.layers[0].b_R[0, 0])
    ((4, 2, 3), 48.0)
    """
    blob = _check_blob(spec, blob)
    layers = [{} for _ in range(spec.num_pseudo_layers)]
    for (p, kind), (offset, shape) in _kind_spans(spec).items():
        layers[p][kind] = blob[offset:offset + int(np.prod(shape))].reshape(shape)
    return CanonicalRNN(spec, [LayerParams(**arrays) for arrays in layers])


def pack(canon):
    """:class:`CanonicalRNN` -> opaque buffer ``[param_count]`` of ``canon.spec.dtype``; inverse of :func:`unpack`."""
    spec = canon.spec
    blob = np.empty(spec.param_count, dtype=spec.dtype)
    for (p, kind), (offset, shape) in _kind_spans(spec).items():
        value = np.asarray(getattr(canon.layers[p], kind))
        if value.shape != shape:
            raise CudnnPortError(
                f"Received {kind} of pseudo-layer {p} with shape {value.shape}, expected {shape} for a {spec.describe()}")
        blob[offset:offset + value.size] = value.reshape(-1)
    return blob
