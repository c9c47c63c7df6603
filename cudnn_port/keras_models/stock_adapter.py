"""A stock Keras ``LSTM`` / ``GRU`` / ``SimpleRNN`` / ``Bidirectional`` layer computed by one fused layer
(:mod:`cudnn_port.layers`).

:class:`StockAdapter` takes the stock layer's place in a rewritten model (:mod:`.stock_keras`): it holds a
``CudnnLSTM`` / ``CudnnGRU`` / ``CudnnRNNTanh`` / ``CudnnRNNRelu`` (one layer, D = 1 or 2,
``return_sequences=True, return_state=True``) named as the stock layer, with the stock layer's weights packed into
its buffer, and turns the fused layer's interface into the stock
layer's. What differs:

- masks: Keras' loop skips a masked step (the states carry over; the output there is zeros with
  ``zero_output_for_mask``, else the previous step's output, zeros before any kept step), whatever the mask; the
  fused layer takes right-padded masks. So each row's kept steps are gathered to the front in time order
  (:func:`.compaction.plan`), the fused layer runs on them with lengths = the count of kept steps, and
  step ``t`` gets the compacted output ``c(t) - 1``, ``c = cumsum(mask)`` (:func:`~.compaction.expand`);
  the final states are the compacted run's (a row keeping no step keeps its initial states). A bidirectional fused
  layer's backward direction over the kept steps is Keras' backward layer skipping the masked ones. Exact for any
  mask (left padding, holes); the identity for a right-padded one;
- states: Keras' ``[B, units]`` each (Bidirectional: forward ones, then backward ones) vs the fused ``[B, D, H]``;
- ``go_backwards=True`` (D = 1): Keras reverses the whole time axis, mask included, and returns the outputs in that
  processing order: the input and mask are reversed, then computed as above;
- the last output (``return_sequences=False``) is Keras' output at the last step processed: the final h, or zeros
  when the row keeps no step, or when that step is masked and ``zero_output_for_mask``;
- Bidirectional (Keras sets ``zero_output_for_mask=return_sequences`` on both layers): ``merge_mode`` concat (the
  fused output itself), sum, ave, mul, or None (two outputs), on both the sequences and the last outputs;
- the output mask is what Keras' layer computes: the input mask with ``return_sequences`` (also for ``go_backwards``,
  as Keras does), else none.

Every op here is a plain TensorFlow op (``ReverseV2``, ``Cumsum``, ``Equal``, ``Sum``, ``GatherV2``, ``Select``),
which ONNX, OpenVINO and TFLite hold as builtins: no loop, no Flex op.
"""
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

import keras

from .compaction import expand, gather_steps, last_output, plan
from ..deps import import_tf
from ..layer_paths import shared
from ..layers import FUSED_CLASSES
from ..layout import own_activation

if TYPE_CHECKING:
    import tensorflow as tf


class StockAdapter(keras.layers.Layer):
    """One stock recurrent layer (or a Bidirectional pair) as a fused layer; see the module docstring."""

    def __init__(self, mode: str, units: int, *, bidirectional: bool = False, go_backwards: bool = False,
                 merge_mode: Optional[str] = "concat", return_sequences: bool = False, return_state: bool = False,
                 zero_output: bool = True, reset_after: bool = True, activation: Optional[str] = None,
                 recurrent_activation: str = "sigmoid", **kwargs):
        super().__init__(**kwargs)
        cls = FUSED_CLASSES[mode]
        extra: Dict[str, Any] = {} if reset_after else {"reset_after": False}  # a stock GRU(reset_after=False)
        if activation is not None and activation != own_activation(mode):  # LSTM(activation="relu") and the like
            extra["activation"] = activation
        if recurrent_activation != "sigmoid":  # LSTM(recurrent_activation="hard_sigmoid")
            extra["recurrent_activation"] = recurrent_activation
        self.fused = cls(units, bidirectional=bidirectional, return_sequences=True, return_state=True,
                         name=self.name, **extra)
        self.mode, self.units, self.bidirectional, self.go_backwards = mode, units, bidirectional, go_backwards
        self.merge_mode, self.return_sequences, self.return_state = merge_mode, return_sequences, return_state
        self.zero_output = zero_output
        self.supports_masking = True

    @property
    def layers(self) -> List[keras.layers.Layer]:
        """The fused layer inside, so that :func:`cudnn_port.layers.fused_layers` finds it."""
        return [self.fused]

    def build(self, input_shape: Tuple[Optional[int], ...]) -> None:
        self.fused.build(input_shape)

    def _states(self, initial_state):
        """Keras' initial states ([h, c] or [h]; Bidirectional: forward ones then backward ones, each [B, units]) as
        the fused layer's [h [B, D, H], c] (None: zeros)."""
        if initial_state is None:
            return None
        tf = import_tf()
        states = list(initial_state) if isinstance(initial_state, (list, tuple)) else [initial_state]
        D, count = (2 if self.bidirectional else 1), (2 if self.mode == "lstm" else 1)
        if len(states) != D * count:
            raise ValueError(f"Received {len(states)} initial states for {self.name}, expected {D * count}")
        if D == 1:  # an expand rather than a one-tensor stack: the pair the fused layer squeezes cancels in graphs
            return [tf.expand_dims(state, 1) for state in states]
        return [tf.stack([states[d * count + k] for d in range(D)], axis=1) for k in range(count)]

    def call(self, sequences: "tf.Tensor", initial_state: "Optional[Sequence[tf.Tensor]]" = None,
             mask: "Optional[tf.Tensor]" = None, training: Optional[bool] = None) -> Any:
        tf = import_tf()
        x = tf.convert_to_tensor(sequences)
        mask = None if mask is None else tf.cast(mask, "bool")
        if self.go_backwards:  # Keras reverses the whole time axis, mask included, and keeps that order
            x, mask = tf.reverse(x, [1]), (None if mask is None else tf.reverse(mask, [1]))
        right_padded = None
        if mask is not None:  # the plan (and the right-padded mask) once per mask in a traced graph
            order, lengths, counts, right_padded = shared("compaction", mask, lambda: _plan(mask))
            x = gather_steps(x, order)
        states = self._states(initial_state)
        y, *finals = self.fused(x, initial_state=states, mask=right_padded, training=False)
        if mask is not None:  # Bidirectional: Keras sets zero_output_for_mask=return_sequences on both layers
            y = expand(y, mask, counts, self.zero_output or self.bidirectional)
            if states is not None:  # a row that keeps no step keeps its initial states (ONNX's LSTM gives zeros)
                kept = tf.reshape(lengths > 0, [-1, 1, 1])
                finals = [tf.where(kept, final, state) for final, state in zip(finals, states)]
        D = 2 if self.bidirectional else 1
        finals = [tf.unstack(state, num=D, axis=1) if D == 2 else [tf.squeeze(state, 1)]  # [h per direction,
                  for state in finals]                                                   # c per direction]
        last = finals[0] if mask is None else [last_output(h, mask, lengths, self.zero_output) for h in finals[0]]
        if self.bidirectional:
            result = self._merge(tf.split(y, 2, axis=-1) if self.return_sequences else last)
        else:
            result = y if self.return_sequences else last[0]
        if not self.return_state:
            return result
        states = [state[d] for d in range(D) for state in finals]  # forward h (c), then backward h (c)
        return (result if isinstance(result, list) else [result]) + states

    def _merge(self, pair):
        return _merged(pair, self.merge_mode)

    def compute_mask(self, inputs: "tf.Tensor", mask: "Optional[tf.Tensor]" = None) -> Any:
        out = mask if self.return_sequences else None
        outs = [out, out] if self.bidirectional and self.merge_mode is None else [out]
        if self.return_state:
            outs += [None] * ((2 if self.bidirectional else 1) * (2 if self.mode == "lstm" else 1))
        return outs if len(outs) > 1 else outs[0]


class StackedAdapter(keras.layers.Layer):
    """Keras' ``RNN(StackedRNNCells([...]))`` as one :class:`StockAdapter` per cell, each cell's output sequence the
    next one's input: Keras' step runs the cells in turn on each time step, so cell k sees cell k-1's output at that
    step, and a masked step is skipped by every cell (each keeps its states), which is each cell's layer skipping
    it. ``go_backwards``: the input and mask are reversed once, and every cell runs over that order, as Keras' loop
    does. States: per cell, as Keras nests them (``initial_state=[[h, c], [h], ...]``; with ``return_state``,
    ``output, [h, c], [h], ...``)."""

    def __init__(self, adapters: Sequence[StockAdapter], *, go_backwards: bool = False, return_state: bool = False,
                 **kwargs):
        super().__init__(**kwargs)
        self.adapters = list(adapters)
        self.go_backwards, self.return_state = go_backwards, return_state
        self.return_sequences = self.adapters[-1].return_sequences
        self.supports_masking = True

    @property
    def layers(self) -> List[keras.layers.Layer]:
        """The cells' adapters, so that :func:`cudnn_port.layers.fused_layers` finds their fused layers."""
        return list(self.adapters)

    def build(self, input_shape: Tuple[Optional[int], ...]) -> None:
        self.built = True  # each adapter was built with its weights (cudnn_port.keras_models.stock_keras)

    def call(self, sequences: "tf.Tensor", initial_state: "Optional[Sequence[Any]]" = None,
             mask: "Optional[tf.Tensor]" = None, training: Optional[bool] = None) -> Any:
        tf = import_tf()
        x = tf.convert_to_tensor(sequences)
        mask = None if mask is None else tf.cast(mask, "bool")
        if self.go_backwards:  # once, for every cell: Keras' loop runs the stacked step over the reversed time axis
            x, mask = tf.reverse(x, [1]), (None if mask is None else tf.reverse(mask, [1]))
        if initial_state is not None and len(initial_state) != len(self.adapters):
            raise ValueError(f"Received {len(initial_state)} initial states for {self.name}, expected one list per "
                             f"cell ({len(self.adapters)})")
        states = []
        for k, adapter in enumerate(self.adapters):
            given = None if initial_state is None else initial_state[k]
            given = None if given is None else (list(given) if isinstance(given, (list, tuple)) else [given])
            x, *finals = adapter(x, initial_state=given, mask=mask, training=False)
            states.append(list(finals))
        return [x] + states if self.return_state else x

    def compute_mask(self, inputs: "tf.Tensor", mask: "Optional[tf.Tensor]" = None) -> Any:
        out = mask if self.return_sequences else None
        if self.return_state:
            return [out] + [_state_masks(a) for a in self.adapters]
        return out


class StackedPairAdapter(keras.layers.Layer):
    """Keras' ``Bidirectional(RNN(StackedRNNCells([...])))``, or a ``Bidirectional`` whose backward layer is not its
    forward one reversed (``backward_layer=GRU(...)`` under an LSTM): two :class:`StackedAdapter` s (or a
    :class:`StockAdapter` for a plain layer), each direction a stack of its own (the backward one over the reversed
    input, its states its own), merged as
    Keras' ``Bidirectional`` merges its two layers: the backward output sequence flipped back along time, then
    ``merge_mode``; states: the forward cells' lists, then the backward cells'. ``initial_state``: the forward cells'
    lists, then the backward cells'."""

    def __init__(self, forward: keras.layers.Layer, backward: keras.layers.Layer, *,
                 merge_mode: Optional[str] = "concat", return_state: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.forward, self.backward = forward, backward
        self.merge_mode, self.return_state = merge_mode, return_state
        self.return_sequences = forward.return_sequences
        self.supports_masking = True

    @property
    def layers(self) -> List[keras.layers.Layer]:
        """The two stacks, so that :func:`cudnn_port.layers.fused_layers` finds their fused layers."""
        return [self.forward, self.backward]

    def build(self, input_shape: Tuple[Optional[int], ...]) -> None:
        self.built = True  # each stack was built with its weights (cudnn_port.keras_models.stock_keras)

    def call(self, sequences: "tf.Tensor", initial_state: "Optional[Sequence[Any]]" = None,
             mask: "Optional[tf.Tensor]" = None, training: Optional[bool] = None) -> Any:
        tf = import_tf()
        half = 0 if initial_state is None else len(initial_state) // 2
        parts = (None, None) if initial_state is None else (initial_state[:half], initial_state[half:])
        ys = [stack(sequences, initial_state=part, mask=mask)
              for stack, part in zip((self.forward, self.backward), parts)]
        states = []
        if self.return_state:
            states = list(ys[0][1:]) + list(ys[1][1:])
            ys = [ys[0][0], ys[1][0]]
        y, y_rev = ys
        if self.return_sequences:
            y_rev = tf.reverse(y_rev, [1])
        output = _merged([y, y_rev], self.merge_mode)
        if not self.return_state:
            return output
        return (output if isinstance(output, list) else [output]) + states

    def compute_mask(self, inputs: "tf.Tensor", mask: "Optional[tf.Tensor]" = None) -> Any:
        out = mask if self.return_sequences else None
        outs = [out, out] if self.merge_mode is None else [out]
        if self.return_state:  # a stack's states nested per cell, a plain layer's flat, as Keras returns them
            for half in (self.forward, self.backward):
                outs += [_state_masks(a) for a in half.adapters] if isinstance(half, StackedAdapter) else \
                    _state_masks(half)
        return outs if len(outs) > 1 else outs[0]


def _state_masks(adapter):
    """None for each state of a stack's element (a cell's adapter: h (, c); a nested stack: one list per cell)."""
    if isinstance(adapter, StackedAdapter):
        return [_state_masks(a) for a in adapter.adapters]
    return [None] * (2 if adapter.mode == "lstm" else 1)


def _merged(pair, merge_mode):
    """A Bidirectional's two outputs merged as Keras merges them."""
    if merge_mode == "concat":
        return import_tf().concat(pair, axis=-1)
    if merge_mode == "sum":
        return pair[0] + pair[1]
    if merge_mode == "ave":
        return (pair[0] + pair[1]) / 2
    if merge_mode == "mul":
        return pair[0] * pair[1]
    return pair  # merge_mode None: two outputs


def _plan(mask):
    """:func:`.compaction.plan` of ``mask`` and the right-padded mask of its lengths."""
    order, lengths, counts = plan(mask)
    return order, lengths, counts, import_tf().sequence_mask(lengths, import_tf().shape(mask)[1])
