"""A stock Keras recurrent layer's fused form: the adapter that takes its place in a rewritten model
(:mod:`.stock_adapter`), its fused layer holding the stock layer's weights packed into cuDNN's buffer
(Keras' kernels are the canonical weights: :func:`cudnn_port.targets.keras.read`, :func:`cudnn_port.layout.pack`).

Which layers get one, and the model rebuilt around them, is :mod:`.stock_keras`; the shape of the form is
decided here: one :class:`~.stock_adapter.StockAdapter` for an ``LSTM`` / ``GRU`` / ``SimpleRNN`` (or a
``Bidirectional`` of two alike), a :class:`~.stock_adapter.StackedAdapter` of one per cell for
``RNN(StackedRNNCells)``, a :class:`~.stock_adapter.StackedPairAdapter` for a ``Bidirectional`` whose
directions are stacks of their own.
"""
from typing import TYPE_CHECKING, Any, List, Optional

import numpy as np

from ..layout import RNNSpec, pack
from .streaming_model import cell_kind, is_stack
from ..targets import keras as keras_target

if TYPE_CHECKING:
    import keras


def stacked(rnn: Any) -> bool:
    """Whether ``rnn`` is Keras' ``RNN(StackedRNNCells([...]))``: cell k's output sequence is cell k+1's input, step
    by step, which is the stack of one layer per cell (each cell's states its own; a masked step skipped by all)."""
    return type(rnn).__name__ == "RNN" and is_stack(getattr(rnn, "cell", None))


def stock_kind(rnn: Any) -> Optional[str]:
    """``LSTM``, ``GRU`` or ``SimpleRNN`` for such a stock layer or a stock ``RNN`` around one such Keras cell
    (``RNN(LSTMCell(64))`` is ``LSTM(64)``); None for any other layer (an ``RNN`` of ``StackedRNNCells`` too)."""
    name = type(rnn).__name__
    if name == "RNN":
        return cell_kind(getattr(rnn, "cell", None))
    return name if name in ("LSTM", "GRU", "SimpleRNN") else None


def two_stacks(layer: "keras.layers.Layer") -> bool:
    """Whether a ``Bidirectional``'s directions are each a stack of their own (a
    :class:`~.stock_adapter.StackedPairAdapter`): either is an ``RNN(StackedRNNCells)``, or the backward
    layer is not the forward one reversed (another kind, size or function: ``backward_layer=GRU(...)`` under an
    LSTM; a forward layer that runs backwards), which one bidirectional stack, one cell for both directions, cannot
    hold."""
    forward, backward = layer.forward_layer, layer.backward_layer
    if stacked(forward) or stacked(backward) or forward.go_backwards or not backward.go_backwards:
        return True
    cell = ("activation", "recurrent_activation", "reset_after")
    return stock_kind(forward) != stock_kind(backward) or forward.cell.units != backward.cell.units or \
        any(forward.cell.get_config().get(k) != backward.cell.get_config().get(k) for k in cell)


def cell_weights(cell: Any) -> List[Any]:
    """[kernel, recurrent_kernel, bias] of a stock LSTM / GRU / SimpleRNN cell as NumPy arrays; a ``use_bias=False``
    cell's bias is zeros of the shape Keras gives it (LSTM ``[4H]``, GRU(reset_after) ``[2, 3H]``, GRU without
    reset_after ``[3H]``, SimpleRNN ``[H]``)."""
    kernel, recurrent = cell.kernel.numpy(), cell.recurrent_kernel.numpy()
    if cell.bias is not None:
        return [kernel, recurrent, cell.bias.numpy()]
    width = recurrent.shape[1]
    two_rows = type(cell).__name__ == "GRUCell" and getattr(cell, "reset_after", True)
    return [kernel, recurrent, np.zeros((2, width) if two_rows else (width,), kernel.dtype)]


def _mode(cell) -> str:
    """The fused mode of a stock LSTM / GRU / SimpleRNN cell that :func:`.stock_keras.classify` passed."""
    name = cell_kind(cell)
    if name == "SimpleRNN":
        return "rnn_relu" if cell.get_config().get("activation") == "relu" else "rnn_tanh"
    return "lstm" if name == "LSTM" else "gru"


STACKED_CELL = "{layer}_cell_{k}"  # the name of cell k's adapter (and fused layer) in an RNN of StackedRNNCells


def adapter(layer: "keras.layers.Layer", name: Optional[str] = None) -> "keras.layers.Layer":
    """The :class:`~.stock_adapter.StockAdapter` of a stock LSTM / GRU / SimpleRNN / Bidirectional, weights
    packed; for an ``RNN(StackedRNNCells(...))``, a :class:`~.stock_adapter.StackedAdapter` of one per cell
    (named :data:`STACKED_CELL`). Named ``name`` (default: as ``layer``)."""
    name = name or layer.name
    # lazy: Keras, loaded on first use (import cudnn_port stays light)
    from .stock_adapter import StackedPairAdapter

    bidirectional = type(layer).__name__ == "Bidirectional"
    rnns = [layer.forward_layer, layer.backward_layer] if bidirectional else [layer]
    first = rnns[0]
    if not bidirectional and stacked(first):
        return _stacked_adapter(layer, name)
    if bidirectional and two_stacks(layer):
        # lazy: Keras, loaded on first use (import cudnn_port stays light)
        import keras

        with keras.name_scope(name):  # bi/bi_forward/bi_forward_cell_0/..., or bi/bi_forward/...
            pair = [_stacked_adapter(rnn, f"{name}_{way}") if stacked(rnn) else
                    _cell_adapter([rnn.cell], f"{name}_{way}", bidirectional=False,
                                  go_backwards=bool(rnn.go_backwards), merge_mode=None,
                                  return_sequences=bool(rnn.return_sequences), return_state=bool(rnn.return_state),
                                  zero_output=bool(rnn.zero_output_for_mask))
                    for rnn, way in zip(rnns, DIRECTIONS)]
        return StackedPairAdapter(*pair, merge_mode=layer.merge_mode, return_state=bool(layer.return_state),
                                  name=name)
    return _cell_adapter([rnn.cell for rnn in rnns], name, bidirectional=bidirectional,
                         go_backwards=bool(first.go_backwards) and not bidirectional,
                         merge_mode=layer.merge_mode if bidirectional else None,
                         return_sequences=bool(first.return_sequences), return_state=bool(layer.return_state),
                         zero_output=bool(first.zero_output_for_mask))


DIRECTIONS = ("forward", "backward")  # a Bidirectional of StackedRNNCells: its stacks' names, {layer}_{direction}


def _stacked_adapter(rnn, name):
    """The :class:`~.stock_adapter.StackedAdapter` named ``name`` of ``RNN(StackedRNNCells(...))`` ``rnn``:
    one adapter per cell, named :data:`STACKED_CELL`, their variables under ``name``; a StackedRNNCells among the
    cells is a StackedAdapter of its own in that place (its cells' states nested in one list, as Keras nests them)."""
    return _stack(rnn.cell.cells, name, go_backwards=bool(rnn.go_backwards),
                  return_sequences=bool(rnn.return_sequences), return_state=bool(rnn.return_state),
                  zero_output=bool(rnn.zero_output_for_mask))


def _stack(cells, name, *, go_backwards, return_sequences, return_state, zero_output):
    # lazy: Keras, loaded on first use (import cudnn_port stays light)
    import keras

    from .stock_adapter import StackedAdapter

    adapters = []
    with keras.name_scope(name):  # the cells' variables named under the layer: rnn/rnn_cell_0/...
        for k, cell in enumerate(cells):
            child, sequences = STACKED_CELL.format(layer=name, k=k), k < len(cells) - 1 or return_sequences
            if is_stack(cell):
                adapters.append(_stack(cell.cells, child, go_backwards=False, return_sequences=sequences,
                                       return_state=True, zero_output=zero_output))
            else:
                adapters.append(_cell_adapter([cell], child, bidirectional=False, go_backwards=False,
                                              merge_mode=None, return_sequences=sequences, return_state=True,
                                              zero_output=zero_output))
    return StackedAdapter(adapters, go_backwards=go_backwards, return_state=return_state, name=name)


def _cell_adapter(cells, name, **flags):
    """A :class:`~.stock_adapter.StockAdapter` named ``name`` of stock ``cells`` (one per direction),
    their weights packed into its fused layer's buffer; ``flags``: the adapter's."""
    # lazy: Keras, loaded on first use (import cudnn_port stays light)
    from .stock_adapter import StockAdapter

    first = cells[0]
    mode = _mode(first)
    config = first.get_config()  # the cell's (an RNN's cell, or the one LSTM / GRU / SimpleRNN keep)
    reset_after = mode != "gru" or bool(config.get("reset_after", True))
    activation = config.get("activation")  # a SimpleRNN's other than tanh / relu: rnn_tanh's buffer
    gates = config.get("recurrent_activation", "sigmoid")
    units = int(first.units)
    adapter = StockAdapter(mode, units, reset_after=reset_after, activation=activation, recurrent_activation=gates,
                           name=name, **flags)
    input_size = int(first.kernel.shape[0])
    adapter.build((None, None, input_size))
    spec = RNNSpec(mode, 1, units, input_size, len(cells) == 2, reset_after=reset_after, activation=activation,
                   recurrent_activation=gates)
    tensors = {f"layer_0/{'backward' if d else 'forward'}/{key}": value
               for d, cell in enumerate(cells) for key, value in zip(("kernel", "recurrent_kernel", "bias"),
                                                                      cell_weights(cell))}
    adapter.fused.opaque_kernel.assign(pack(keras_target.read(tensors, "", spec), "float32"))
    return adapter
