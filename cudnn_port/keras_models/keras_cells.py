"""Keras' own recurrent layers read by their structure, nothing built: which of Keras' cells a layer holds
(:func:`cell_kind`, :func:`is_stack`, :func:`cell_leaves`, :func:`state_count`), a ``Bidirectional``'s two layers
(:func:`layer_halves`), and which layers keep states between calls and which nested models hold them
(:func:`stateful_layers`, :func:`stateful_holders`): what :mod:`.streaming_model` streams and
:mod:`.stock_keras` rewrites.
"""
from typing import Any, Dict, Iterator, List, Optional


# stock layers whose states are h (and c) [batch, units] (an RNN of another cell is refused by stock_keras)
STREAMED = ("LSTM", "GRU", "SimpleRNN", "RNN", "Bidirectional")
CELLS = {"LSTMCell": "LSTM", "GRUCell": "GRU", "SimpleRNNCell": "SimpleRNN"}  # Keras' cells: the layer each equals


def cell_kind(cell: Any) -> Optional[str]:
    """``LSTM``, ``GRU`` or ``SimpleRNN`` for Keras' own ``LSTMCell``, ``GRUCell``, ``SimpleRNNCell``; else None."""
    return CELLS.get(type(cell).__name__) if type(cell).__module__.startswith("keras.") else None


def is_stack(cell: Any) -> bool:
    """Whether ``cell`` is Keras' own ``StackedRNNCells``."""
    return type(cell).__name__ == "StackedRNNCells" and type(cell).__module__.startswith("keras.")


def is_stateful(layer: Any) -> bool:
    """Whether ``layer`` is a stock recurrent layer of :data:`STREAMED` (a ``Bidirectional``: either half) with
    ``stateful=True``."""
    if type(layer).__name__ not in STREAMED or not type(layer).__module__.startswith("keras."):
        return False  # another layer's statefulness is refused with its other reasons (stock_keras)
    inner = [layer.forward_layer, layer.backward_layer] if hasattr(layer, "forward_layer") else [layer]
    return any(getattr(rnn, "stateful", False) for rnn in inner)


def stateful_layers(model: Any) -> Iterator[Any]:
    """Each stateful stock layer of ``model``, nested models' included."""
    for layer in getattr(model, "layers", None) or []:
        if getattr(layer, "layers", None) and not hasattr(layer, "forward_layer"):
            yield from stateful_layers(layer)
        elif is_stateful(layer):
            yield layer


def stateful_holders(model: Any) -> Dict[int, Any]:
    """{id: model} of the models nested in ``model`` (at any depth) that hold a stateful layer."""
    found: Dict[int, Any] = {}

    def visit(container: Any) -> bool:
        holds = False
        for layer in getattr(container, "layers", None) or []:
            if getattr(layer, "layers", None) and not hasattr(layer, "forward_layer"):
                if visit(layer):
                    found[id(layer)], holds = layer, True
            holds = holds or is_stateful(layer)
        return holds

    visit(model)
    return found


def state_count(cell: Any) -> int:
    """How many states a stock cell carries: 2 for an LSTM's (h, c), else 1."""
    return 2 if type(cell).__name__ == "LSTMCell" else 1


def layer_halves(layer: Any) -> List[Any]:
    """A Bidirectional's forward and backward layers; any other layer alone."""
    return [layer.forward_layer, layer.backward_layer] if hasattr(layer, "forward_layer") else [layer]


def cell_leaves(layer: Any) -> List[Any]:
    """A stateful layer's cells: its one cell, or those of its ``StackedRNNCells`` (nested ones' cells in their
    place), each with states of its own."""
    def leaves(cell: Any) -> List[Any]:
        return [c for inner in cell.cells for c in leaves(inner)] if is_stack(cell) else [cell]

    return leaves(layer.cell)
