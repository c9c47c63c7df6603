"""The cuDNN opaque parameter buffer: its spec, its layout, and packing to and from the canonical model.

Layout (G = 4 gates for LSTM, 3 for GRU, 1 for the plain RNNs ``rnn_tanh`` / ``rnn_relu``; D = 1 or 2 directions;
pseudo-layer p = layer * D + direction;
S = P when the LSTM has a projection of size P, else H)::

    for p in pseudo-layers:                      # weights of every pseudo-layer first ...
        W_0 .. W_{G-1}     each [H, I_l]  row-major, I_0 = I, I_l = D * S for l >= 1
        R_0 .. R_{G-1}     each [H, S]    row-major
        Proj               [P, H]         (LSTM with projection only: h = Proj @ (o * tanh(c)))
    for p in pseudo-layers:                      # ... then the biases of every pseudo-layer
        b_W_0 .. b_W_{G-1} each [H]
        b_R_0 .. b_R_{G-1} each [H]
    size = sum_p G * H * (I_l + S + 2) + P * H   (no padding)

Gates are in cuDNN order: LSTM i, f, c, o; GRU r, z, h; RNN one block, h (``gates.CUDNN_ORDER``).

Checked against real cuDNN (``tests/fixtures/cudnn/``, cuDNN 9.19 on an H100, 2026-11-22): in every case there
(LSTM and GRU, 1 to 3 layers, one and two directions, fp32 and fp16, an LSTM with projection) cuDNN's own offsets
of every matrix and bias, read through ``cudnnGetRNNWeightParams``, are exactly the offsets of :meth:`RNNSpec.blocks`,
and the buffer's size is exactly :attr:`RNNSpec.param_count` (``tests/test_cudnn_fixtures.py``). Public sources
agree (docs/conventions.md, section 1): TensorFlow's ``cudnn_rnn_ops.cc``, Lingvo's GPU test, MXNet's rnn_layer,
Keras' ``_standardize_cudnn_weights``, a real R-Net checkpoint (86184 = 3*76*(300+76) + 6*76 elements).

Not supported (:class:`~cudnn_port.errors.UnsupportedError`): ``input_mode=skip_input``, which drops layer 0's
input weights (x is added to each gate directly); it is rare in checkpoints.

The block list (:meth:`RNNSpec.blocks`) is the single encoding of this layout: :attr:`RNNSpec.param_count`,
:func:`unpack`, :func:`pack`, the TensorFlow slicing in :mod:`cudnn_port.tf_graph` and the fused layers'
initializer all derive from it.

>>> spec = RNNSpec("gru", num_layers=1, num_units=76, input_size=300)
>>> spec.param_count
86184
"""
import math
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np

from .canonical import CanonicalRNN, LayerParams
from .errors import CudnnPortError, UnsupportedError

MODES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}  # cuDNN's four cells (cudnnRNNMode_t) and their G
RNN_MODES = ("rnn_tanh", "rnn_relu")  # h' = act(W x + b_W + R h + b_R): CUDNN_RNN_TANH, CUDNN_RNN_RELU
RNN_OWN = {"tanh": "rnn_tanh", "relu": "rnn_relu"}  # the plain cells cuDNN computes, by their function
# a cell's candidate functions (Keras' names) the CPU forms compute exactly; the ONNX node names each
# (exports.onnx_portable), TFLite's builtins hold some (exports.tflite.cannot_hold)
# (Keras 3's definitions, at the defaults a name in a layer's config means: leaky_relu's slope 0.2, gelu exact (erf),
# celu's alpha 1, the shrinks' threshold 0.5, squareplus' b 4; keras/src/activations/activations.py): every
# element-wise function Keras names but ``threshold``, which takes arguments a name cannot give, and
# ``softmax``, ``log_softmax`` and ``sparsemax``, over the last axis of one gate's block, as Keras' cells apply every
# function (``glu`` halves its input, so no cell runs it: Keras' own layer fails on its shapes)
ACTIVATIONS = ("tanh", "relu", "sigmoid", "hard_sigmoid", "linear", "softsign", "softplus", "elu", "silu", "gelu",
               "selu", "relu6", "leaky_relu", "exponential", "mish", "hard_silu", "log_sigmoid", "tanh_shrink",
               "hard_tanh", "celu", "hard_shrink", "soft_shrink", "sparse_plus", "sparse_sigmoid", "squareplus",
               "softmax", "log_softmax", "sparsemax")
# the gates' functions: any of them. Gates other than sigmoid make every ONNX node of the cell a Scan loop
# (exports.onnx_scan), which stops at each sequence's length itself: the OpenVINO-safe form of a fused node needs
# gates that are exactly 0 and 1 far enough out (exports.onnx_portable), and only sigmoid is among those it runs
GATE_ACTIVATIONS = ACTIVATIONS
FLOAT_DTYPES = ("float16", "float32", "float64")
KINDS = ("W", "R", "P", "b_W", "b_R")  # LayerParams fields, in buffer order within a pseudo-layer
MAX_ELEMENTS = 1 << 40  # far beyond any real buffer; keeps sizes exact in int64 arithmetic


@dataclass(frozen=True)
class Block:
    """One contiguous piece of the buffer: field ``kind`` of pseudo-layer ``pseudo`` (its G gate blocks together,
    gate-major, or the one projection matrix), starting at element ``offset``."""

    pseudo: int
    kind: str
    offset: int
    shape: tuple

    @property
    def size(self) -> int:
        return math.prod(self.shape)  # not np.prod: inspect sizes thousands of candidate specs' blocks

    @property
    def end(self) -> int:
        return self.offset + self.size


@dataclass(frozen=True)
class RNNSpec:
    """What a cuDNN RNN stack is: enough to lay out its buffer.

    mode: ``"lstm"``, ``"gru"``, ``"rnn_tanh"`` or ``"rnn_relu"``; num_layers: L >= 1; num_units: H;
    input_size: I (width of layer 0's input);
    bidirectional: D = 2 when true; dtype: element type of the buffer; num_proj: P, the LSTM's projection size
    (0 = none; 0 < P < H), which makes h (and every layer's output) P wide; reset_after: a GRU's candidate reads
    ``r * (R_h h + b_R_h)`` (True: cuDNN's form, the only one cuDNN computes) or ``R_h (r * h) + b_R_h`` (False:
    Keras' ``GRU(reset_after=False)``, ONNX's ``linear_before_reset=0``): the same buffer, other math, converted
    from stock Keras layers and never run by cuDNN (:attr:`cudnn_computes`); activation: the candidate's (and the
    LSTM's cell output's) function, one of :data:`ACTIVATIONS` (None: the cell's own, ``relu`` for ``rnn_relu``,
    else ``tanh``); another than cuDNN's (Keras' ``LSTM(activation="relu")``) is, like reset-before, held in the same
    buffer and never run by cuDNN; recurrent_activation: the gates' function, one of :data:`GATE_ACTIVATIONS`
    (``sigmoid``, cuDNN's; Keras' ``recurrent_activation="hard_sigmoid"`` is, again, never run by cuDNN).
    """

    mode: str
    num_layers: int
    num_units: int
    input_size: int
    bidirectional: bool = False
    dtype: str = "float32"
    num_proj: int = 0
    input_mode: str = "linear_input"
    reset_after: bool = True
    activation: Optional[str] = None
    recurrent_activation: str = "sigmoid"

    def __post_init__(self):
        if self.mode not in MODES:
            raise CudnnPortError(f"Received mode {self.mode!r}, expected one of {sorted(MODES)}")
        for name in ("num_layers", "num_units", "input_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value < MAX_ELEMENTS:
                raise CudnnPortError(f"Received {name}={_show(value)}, expected a positive integer")
            object.__setattr__(self, name, int(value))
        object.__setattr__(self, "bidirectional", bool(self.bidirectional))
        if self.dtype not in FLOAT_DTYPES:
            raise CudnnPortError(f"Received dtype {self.dtype!r}, expected one of {FLOAT_DTYPES}")
        proj = self.num_proj or 0
        if isinstance(proj, bool) or not isinstance(proj, (int, np.integer)) or proj < 0:
            raise CudnnPortError(f"Received num_proj={_show(proj)}, expected 0 (no projection) or a positive integer")
        if proj and self.mode != "lstm":
            raise CudnnPortError(f"Received num_proj={proj} for a {self.mode.upper()}; only LSTM has a projection")
        if proj and proj >= self.num_units:
            raise CudnnPortError(f"Received num_proj={proj} with num_units={self.num_units}, expected "
                                 "num_proj < num_units (cuDNN projects only to a smaller size; 0 means none)")
        object.__setattr__(self, "num_proj", int(proj))
        object.__setattr__(self, "reset_after", bool(self.reset_after))
        own = own_activation(self.mode)
        object.__setattr__(self, "activation", own if self.activation is None else str(self.activation))
        if self.activation not in ACTIVATIONS:
            raise CudnnPortError(f"Received activation={self.activation!r} for a {self.mode.upper()}, expected "
                                 f"{own!r} or one of {', '.join(ACTIVATIONS)}")
        if self.is_rnn and self.activation in RNN_OWN and self.activation != own:  # cuDNN's other plain cell
            raise CudnnPortError(f"Received activation={self.activation!r} for mode {self.mode!r}; a plain RNN of "
                                 f"{self.activation} is mode {RNN_OWN[self.activation]!r}")
        object.__setattr__(self, "recurrent_activation", str(self.recurrent_activation))
        if self.recurrent_activation not in GATE_ACTIVATIONS or self.is_rnn and self.recurrent_activation != "sigmoid":
            raise CudnnPortError(f"Received recurrent_activation={self.recurrent_activation!r} for a "
                                 f"{self.mode.upper()}, expected " + ("'sigmoid' (a plain RNN has no gate)"
                                                                      if self.is_rnn else
                                                                      f"one of {', '.join(GATE_ACTIVATIONS)}"))
        if not self.reset_after and self.mode != "gru":
            raise CudnnPortError(f"Received reset_after=False for a {self.cell_name}; only a GRU has a reset gate")
        if self.input_mode != "linear_input":
            raise UnsupportedError(
                f"input_mode={self.input_mode!r} is not supported: it drops layer 0's input weights "
                "(x is added to each gate directly); retrain with input_mode='linear_input'")
        if self.param_count >= MAX_ELEMENTS:
            raise CudnnPortError(f"Received a {self.describe()}, whose buffer would hold {self.param_count} "
                                 "elements; check the sizes")

    @property
    def num_gates(self) -> int:
        return MODES[self.mode]

    @property
    def is_rnn(self) -> bool:
        """A plain RNN cell (``rnn_tanh`` / ``rnn_relu``): one block, no c."""
        return self.mode in RNN_MODES

    @property
    def cell_name(self) -> str:
        """The cell as people name it: ``LSTM``, ``GRU``, ``GRU (reset before)``, ``RNN (tanh)``, ``RNN (relu)``."""
        if self.is_rnn:
            return f"RNN ({self.activation})"
        notes = ["reset before"] * (not self.reset_after)
        notes += [f"activation {self.activation}"] * (self.activation != "tanh")
        notes += [f"gates {self.recurrent_activation}"] * (self.recurrent_activation != "sigmoid")
        return self.mode.upper() + (f" ({', '.join(notes)})" if notes else "")

    @property
    def cudnn_computes(self) -> bool:
        """Whether cuDNN computes this cell (not a reset-before GRU, nor a cell whose activation is not its own, nor
        gates other than sigmoid: only the CPU paths compute those)."""
        return self.reset_after and self.activation == own_activation(self.mode) and \
            self.recurrent_activation == "sigmoid"

    @property
    def num_dirs(self) -> int:
        return 2 if self.bidirectional else 1

    @property
    def num_pseudo_layers(self) -> int:
        return self.num_layers * self.num_dirs

    @property
    def state_size(self) -> int:
        """S: the width of h (P with a projection, else H). c is always H wide."""
        return self.num_proj or self.num_units

    @property
    def output_size(self) -> int:
        """D * S: the width of every layer's output."""
        return self.num_dirs * self.state_size

    def layer_input_size(self, layer: int) -> int:
        """I_l: the width of layer ``layer``'s input."""
        return self.input_size if layer == 0 else self.output_size

    def blocks(self) -> list:
        """Every :class:`Block` of the buffer, in buffer order (see the module docstring)."""
        G, H, S, P = self.num_gates, self.num_units, self.state_size, self.num_proj
        out, offset = [], 0
        shapes: List[Tuple[int, str, Tuple[int, ...]]] = []
        for p in range(self.num_pseudo_layers):
            shapes += [(p, "W", (G, H, self.layer_input_size(p // self.num_dirs))), (p, "R", (G, H, S))]
            shapes += [(p, "P", (P, H))] if P else []
        shapes += [(p, kind, (G, H)) for p in range(self.num_pseudo_layers) for kind in ("b_W", "b_R")]
        for p, kind, shape in shapes:
            out.append(Block(p, kind, offset, shape))
            offset += out[-1].size
        return out

    @property
    def param_count(self) -> int:
        """Elements in the buffer (never bytes)."""
        return self.blocks()[-1].end

    def to_dict(self) -> dict:
        d = asdict(self)
        del d["input_mode"]
        for key, own in (("reset_after", True), ("activation", own_activation(self.mode)),
                         ("recurrent_activation", "sigmoid")):
            if d[key] == own:  # the cell's own: dicts (manifests) name these only where they differ
                del d[key]
        return d

    def flags(self) -> str:
        """The CLI flags that select this spec."""
        return (f"--mode {self.mode} --num-layers {self.num_layers} --num-units {self.num_units} "
                f"--input-size {self.input_size} " + ("--bidirectional" if self.bidirectional else "--unidirectional")
                + (f" --num-proj {self.num_proj}" if self.num_proj else ""))

    def describe(self) -> str:
        direction = "bidirectional" if self.bidirectional else "unidirectional"
        proj = f", projection {self.num_proj}" if self.num_proj else ""
        return (f"{self.num_layers}-layer {direction} {self.cell_name}, input {self.input_size}, "
                f"hidden {self.num_units}{proj}, {self.dtype}")


def own_activation(mode: str) -> str:
    """The function cuDNN's cell of ``mode`` computes where LSTM and GRU compute tanh: relu for ``rnn_relu``."""
    return "relu" if mode == "rnn_relu" else "tanh"


def _show(value):
    """A value for a message: NumPy integers as plain numbers (not ``np.int32(7)``)."""
    return int(value) if isinstance(value, np.integer) else repr(value)


def _check_blob(spec: RNNSpec, blob) -> np.ndarray:
    blob = np.asarray(blob)
    if blob.ndim != 1:
        raise CudnnPortError(f"Received a buffer of shape {blob.shape}, expected a flat vector; pass blob.reshape(-1)")
    if blob.size != spec.param_count:
        raise CudnnPortError(
            f"Received a buffer of {blob.size} elements, expected {spec.param_count} for a {spec.describe()}; "
            "check the spec (cudnn-port inspect lists the specs that fit)")
    return blob


def unpack(spec: RNNSpec, blob: np.ndarray) -> CanonicalRNN:
    """Opaque buffer ``[param_count]`` -> :class:`CanonicalRNN` in cuDNN gate order.

    The canonical arrays are views into ``blob`` (no copy): W ``[G, H, I_l]``, R ``[G, H, S]``, b_W and b_R
    ``[G, H]``, and P ``[P, H]`` (None without projection) per pseudo-layer.

    >>> spec = RNNSpec("lstm", 1, 2, 3)
    >>> canon = unpack(spec, np.arange(spec.param_count, dtype="float32"))
    >>> canon.layers[0].W.shape, float(canon.layers[0].b_R[0, 0])
    ((4, 2, 3), 48.0)
    """
    blob = _check_blob(spec, blob)
    layers: List[Dict[str, np.ndarray]] = [{} for _ in range(spec.num_pseudo_layers)]
    for block in spec.blocks():
        layers[block.pseudo][block.kind] = blob[block.offset:block.end].reshape(block.shape)
    return CanonicalRNN(spec, [LayerParams(**arrays) for arrays in layers])


def pack(canon: CanonicalRNN, dtype: Optional[str] = None) -> np.ndarray:
    """:class:`CanonicalRNN` -> opaque buffer ``[param_count]`` of ``dtype`` (default ``canon.spec.dtype``);
    inverse of :func:`unpack`."""
    spec = canon.spec
    blob = np.empty(spec.param_count, dtype=dtype or spec.dtype)
    for block in spec.blocks():
        value = np.asarray(getattr(canon.layers[block.pseudo], block.kind))
        if value.shape != block.shape:
            raise CudnnPortError(f"Received {block.kind} of pseudo-layer {block.pseudo} with shape {value.shape}, "
                                 f"expected {block.shape} for a {spec.describe()}")
        blob[block.offset:block.end] = value.reshape(-1)
    return blob
