"""TF1 checkpoints that hold only canonical cell tensors, no cuDNN buffer: what ``tf.contrib.cudnn_rnn``'s
``CudnnLSTMSaveable`` / ``CudnnGRUSaveable`` wrote for graphs saved through a CPU-compatible cell, and what
TF1 graphs built on the cuDNN-compatible cells themselves wrote::

    {prefix}/rnn/multi_rnn_cell/cell_{l}/{cell}/...                                   (unidirectional)
    {prefix}/multi_rnn_cell/cell_{l}/{cell}/...                                       (older unidirectional)
    {prefix}/stack_bidirectional_rnn/cell_{l}/bidirectional_rnn/{fw,bw}/{cell}/...    (bidirectional)

with ``{cell}`` ``cudnn_compatible_lstm_cell`` (kernel [I_l + H, 4H], bias [4H]), ``cudnn_compatible_gru_cell``
(gates/…, candidate/…) or ``lstm_cell`` (``LSTMBlockCell`` / ``LSTMCell`` names, optionally with
``projection/kernel``). The spec is read off those names and shapes (:func:`cudnn_port.targets.tf1.detect`), the
tensors are read back into canonical weights by the tf1 target's reader, and each stack is presented as one
synthesised buffer ``{prefix}/opaque_kernel`` packed in cuDNN's layout with its spec stated in ``specs``, so the
rest of the conversion is the one for a checkpoint with a buffer. The canonical tensors stay in the source: with
``--style tf1`` they are rewritten under the same names with the same values, with another style they are copied
into OUT/checkpoint unchanged.

``lstm_cell`` tensors do not record a forget bias: LSTMBlockCell and LSTMCell add ``forget_bias`` (default 1.0)
at run time, the cuDNN-compatible cell uses 0. They are converted as stored (forget_bias 0, what the cuDNN saveable
wrote), and inspect and the manifest say so.
"""
import re
from dataclasses import replace
from typing import Dict, List, Mapping, Sequence, Set

import numpy as np

from ..canonical import CanonicalRNN, LayerParams
from ..errors import CudnnPortError
from ..layout import FLOAT_DTYPES, pack
from ..source import BUFFER, Source, buffer_name
from ..targets import tf1

_CELL = re.compile(r"^(?:(.+?)/)??(?:(?:rnn/)?multi_rnn_cell/cell_\d+"
                   r"|stack_bidirectional_rnn/cell_\d+/bidirectional_rnn/(?:fw|bw))"
                   r"/(cudnn_compatible_lstm_cell|cudnn_compatible_gru_cell|lstm_cell)/(?:gates/)?kernel$")
CELL_WORDS = {"cudnn_compatible_lstm_cell": "CudnnCompatibleLSTMCell", "cudnn_compatible_gru_cell":
              "CudnnCompatibleGRUCell", "lstm_cell": "LSTMBlockCell / LSTMCell names, forget_bias 0 assumed (as "
                                                     "the cuDNN saveable wrote them; not stored in the checkpoint)"}


def canonical_prefixes(shapes: Mapping[str, Sequence[int]]) -> Dict[str, str]:
    """{prefix: cell name} of every scope holding TF1 canonical cells but no ``{prefix}/opaque_kernel`` buffer."""
    found: Dict[str, Set[str]] = {}
    for name in shapes:
        m = _CELL.match(name)
        if m:
            found.setdefault(m.group(1) or "", set()).add(m.group(2))
    buffers = {name.rsplit("/", 1)[0] if "/" in name else "" for name in shapes if name.endswith(BUFFER)}
    return {prefix: " and ".join(sorted(cells)) for prefix, cells in found.items() if prefix not in buffers}


class CanonicalCheckpoint(Source):
    """A :class:`~cudnn_port.checkpoint.Checkpoint` plus one synthesised buffer ``{prefix}/opaque_kernel`` for each
    scope of canonical cells (see the module docstring); every variable of the checkpoint stays as it is."""

    default_style = "tf1"

    def __init__(self, checkpoint, prefixes: Dict[str, str]):
        self.checkpoint, self.prefix = checkpoint, checkpoint.prefix
        self.format = f"{checkpoint.format}, canonical TF1 cells without a cuDNN buffer"
        self.names_note = checkpoint.names_note
        self.shapes, self.dtypes = dict(checkpoint.shapes), dict(checkpoint.dtypes)
        self.canonical, self._cells = {}, {}
        for scope, cell in prefixes.items():
            if " and " in cell:  # a cuDNN stack is all LSTM or all GRU: its names must not read as "missing"
                raise CudnnPortError(f"{checkpoint.prefix}: the cells under '{scope or '(top level)'}' mix {cell}; "
                                     "one cuDNN stack is all LSTM or all GRU, so there is no stack to convert")
            spec = tf1.detect(checkpoint.shapes, scope)
            if spec is None:
                raise CudnnPortError(f"{checkpoint.prefix}: the {cell} tensors under '{scope or '(top level)'}' "
                                     "have shapes no LSTM/GRU stack has; the checkpoint is damaged or edited")
            name = buffer_name(scope)
            reader = tf1.variant(checkpoint.shapes, scope)
            expected = _names(reader, spec, scope)
            stored = _stored(expected, cell)
            wanted = list(stored.values())
            missing = [n for n in wanted if n not in checkpoint.shapes and "bias_cudnn_" not in n]
            if missing:
                raise CudnnPortError(f"{checkpoint.prefix}: the canonical cells under '{scope or '(top level)'}' "
                                     f"lack {missing[0]} ({len(missing)} tensors missing); is the checkpoint "
                                     "complete?")
            for n, shape in expected.items():
                if stored[n] in checkpoint.shapes and tuple(checkpoint.shapes[stored[n]]) != shape:
                    raise CudnnPortError(f"{stored[n]} has shape {list(checkpoint.shapes[stored[n]])}, but the cells "
                                         f"under '{scope or '(top level)'}' ({spec.describe()}) need {list(shape)}; "
                                         "the checkpoint is damaged or edited")
            dtype = checkpoint.dtypes[wanted[0]]
            if dtype not in FLOAT_DTYPES:
                raise CudnnPortError(f"{wanted[0]} has dtype {dtype}; expected one of {', '.join(FLOAT_DTYPES)}")
            spec = replace(spec, dtype=dtype)
            self.canonical[name] = (spec, reader, scope)
            self.specs[name] = spec
            self._cells[name] = cell
            self.shapes[name], self.dtypes[name] = (spec.param_count,), dtype

    def canon(self, name: str) -> CanonicalRNN:
        """The canonical model of synthesised buffer ``name``, read from the checkpoint's cell tensors."""
        spec, reader, scope = self.canonical[name]
        stored = _stored(_names(reader, spec, scope), self._cells[name])
        tensors = {n: self.checkpoint.get(s) for n, s in stored.items() if s in self.checkpoint.shapes}
        canon = reader.read(tensors, scope, spec)
        layers = [LayerParams(*(None if v is None else np.asarray(v, spec.dtype) for v in (p.W, p.R, p.b_W, p.b_R,
                                                                                             p.P)))
                  for p in canon.layers]
        return CanonicalRNN(spec, layers)

    def nonfinite_tensor(self, name: str) -> str:
        """The checkpoint tensor behind synthesised buffer ``name`` that holds NaN/Inf (the user's name), or
        ``name``."""
        if name not in self.canonical:
            return name
        spec, reader, scope = self.canonical[name]
        stored = _stored(_names(reader, spec, scope), self._cells[name]).values()
        return next((s for s in stored if s in self.checkpoint.shapes and
                     not np.isfinite(self.checkpoint.get(s)).all()), name)

    def get(self, name: str) -> np.ndarray:
        if name in self.canonical:
            return pack(self.canon(name))
        return self.checkpoint.get(name)

    def files(self) -> List[str]:
        return self.checkpoint.files()

    def describe(self, name: str) -> str:
        spec, _, scope = self.canonical[name]
        return (f"no cuDNN buffer: TF1 canonical cells ({CELL_WORDS[self._cells[name]]}) under "
                f"'{scope or '(top level)'}', spec read from their names and shapes, packed into cuDNN's layout")


def _names(reader, spec, scope):
    """{name: shape} of the tensors ``reader`` reads for ``spec`` under ``scope`` (a legacy LSTM's bias_cudnn_0/1
    among them: they are read where present)."""
    names = {}
    for layer in range(spec.num_layers):
        G, H, S, width = spec.num_gates, spec.num_units, spec.state_size, spec.layer_input_size(layer)
        zeros = LayerParams(W=np.zeros((G, H, width)), R=np.zeros((G, H, S)), b_W=np.zeros((G, H)),
                            b_R=np.zeros((G, H)), P=np.zeros((spec.num_proj, H)) if spec.num_proj else None)
        for direction in range(spec.num_dirs):
            names.update({n: tuple(np.shape(v)) for n, v in
                          reader.write_layer(spec, scope, layer, direction, zeros).items()})
    return names


def _stored(names, cell):
    """{name the tf1 target reads: name in the checkpoint}: ``lstm_cell`` tensors are read where the target
    expects ``cudnn_compatible_lstm_cell`` ones (same layout; the target writes the cuDNN-compatible names)."""
    if cell != "lstm_cell":
        return {n: n for n in names}
    return {n: n.replace("/cudnn_compatible_lstm_cell/", "/lstm_cell/") for n in names}


def with_canonical_stacks(checkpoint: Source) -> Source:
    """``checkpoint`` itself, or wrapped in :class:`CanonicalCheckpoint` where it holds canonical cells without a
    buffer."""
    prefixes = canonical_prefixes(checkpoint.shapes)
    return CanonicalCheckpoint(checkpoint, prefixes) if prefixes else checkpoint
