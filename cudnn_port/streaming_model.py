"""Stateful Keras models (``stateful=True`` recurrent layers) as streaming models: states in, states out.

A stateful layer starts each call from the final states of its previous call, kept inside the layer. A CPU artifact
keeps nothing between calls, so the model is exported in the form the per-stack ``model_stateful.onnx`` has: each
stateful layer's initial states are extra inputs (``<layer>_h``, and ``<layer>_c`` for an LSTM, ``[batch, units]``;
for an ``RNN`` of ``StackedRNNCells``, ``<layer>_cell<k>_h`` (``_c``) for each cell k) and its final states extra
outputs, after the model's own. A caller starts a stream with zeros (Keras'
``reset_states()``) and feeds each call's final states into the next call. :func:`streaming_twin` builds that
model from stock Keras layers (each stateful layer replaced by a copy with ``stateful=False, return_state=True``
holding the same weights, the other layers shared), so it is also the judge of the artifacts: Keras' own math.
Batch becomes dynamic (a stateful layer needs a fixed batch only to keep its states).

A stateful ``Bidirectional`` streams too: each direction keeps its states from chunk to chunk, the backward one its
state after reading the chunk from its end, as Keras' stateful layers do; its state inputs are
``<layer>_forward_h`` (``_c``) then ``<layer>_backward_h`` (``_c``).

Refused in one line: a stateful layer inside a nested model or given ``initial_state`` by the model itself, a
stateful layer of a cell other than Keras' own, or of a ``StackedRNNCells`` holding another (Keras cannot build the
stateless twin of nested states), a stateful ``Bidirectional`` of ``StackedRNNCells`` or with an LSTM in one direction
only (Keras' ``Bidirectional`` gives each direction half of its ``initial_state``), and a stateful layer in a
subclassed model.
"""
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from .errors import UnsupportedError

if TYPE_CHECKING:
    import keras


# stock layers whose states are h (and c) [batch, units] (an RNN of another cell is refused by cudnn_port.stock_keras)
STREAMED = ("LSTM", "GRU", "SimpleRNN", "RNN", "Bidirectional")
CELLS = {"LSTMCell": "LSTM", "GRUCell": "GRU", "SimpleRNNCell": "SimpleRNN"}  # Keras' cells: the layer each equals


def cell_kind(cell: Any) -> Optional[str]:
    """``LSTM``, ``GRU`` or ``SimpleRNN`` for Keras' own ``LSTMCell``, ``GRUCell``, ``SimpleRNNCell``; else None."""
    return CELLS.get(type(cell).__name__) if type(cell).__module__.startswith("keras.") else None


def is_stack(cell: Any) -> bool:
    """Whether ``cell`` is Keras' own ``StackedRNNCells``."""
    return type(cell).__name__ == "StackedRNNCells" and type(cell).__module__.startswith("keras.")


def _stateful(layer) -> bool:
    if type(layer).__name__ not in STREAMED or not type(layer).__module__.startswith("keras."):
        return False  # another layer's statefulness is refused with its other reasons (cudnn_port.stock_keras)
    inner = [layer.forward_layer, layer.backward_layer] if hasattr(layer, "forward_layer") else [layer]
    return any(getattr(rnn, "stateful", False) for rnn in inner)


def _walk(model, nested=False):
    for layer in getattr(model, "layers", None) or []:
        if getattr(layer, "layers", None) and not hasattr(layer, "forward_layer"):
            yield from ((found, True) for found, _ in _walk(layer, True))
        elif _stateful(layer):
            yield layer, nested


def streaming_twin(model: "keras.Model") -> Tuple["keras.Model", List[Dict[str, Any]]]:
    """(``model`` itself and [] when no layer of it is stateful; else the streaming model described in the module
    docstring and one record per stateful layer: {layer, state_inputs, state_outputs (the output names every
    artifact gives them: ``output_k``)}). Raises :class:`~cudnn_port.errors.UnsupportedError` for what does not
    stream."""
    # lazy: Keras, loaded on first use (import cudnn_port stays light)
    import keras

    found = list(_walk(model))
    if not found:
        return model, []
    for layer, nested in found:
        if hasattr(layer, "forward_layer") and any(is_stack(rnn.cell) for rnn in _halves(layer)):
            raise UnsupportedError(f"layer {layer.name} (Bidirectional): stateful=True around an RNN of "
                                   "StackedRNNCells, whose nested states Keras' Bidirectional does not take as "
                                   "initial_state; rebuild it with stateful=False")
        if hasattr(layer, "forward_layer") and len({_kind_states(rnn.cell) for rnn in _halves(layer)}) > 1:
            raise UnsupportedError(f"layer {layer.name} (Bidirectional): stateful=True with an LSTM in one direction "
                                   "only; Keras' Bidirectional gives each direction half of its initial_state, so "
                                   "its states cannot be fed back; use one kind of layer for both directions")
        if nested:
            raise UnsupportedError(f"layer {layer.name} ({type(layer).__name__}): stateful=True inside a nested "
                                   "model; build the model flat to export it as a streaming model")
        if not hasattr(layer, "forward_layer") and is_stack(layer.cell) and any(map(is_stack, layer.cell.cells)):
            raise UnsupportedError(f"layer {layer.name} ({type(layer).__name__}): stateful=True with a "
                                   "StackedRNNCells inside its StackedRNNCells, whose nested states Keras cannot "
                                   "build a functional model around; put all the cells in one StackedRNNCells")
        other = next((c for rnn in _halves(layer) for c in _cells(rnn) if cell_kind(c) is None), None)
        if other is not None:
            raise UnsupportedError(f"layer {layer.name} ({type(layer).__name__}): stateful=True with a "
                                   f"{type(other).__name__} cell, which has no fused form (only Keras' LSTMCell, "
                                   "GRUCell and SimpleRNNCell)")
    if type(model).__name__ not in ("Functional", "Sequential"):
        raise UnsupportedError(f"model {model.name} is a subclassed {type(model).__name__} with a stateful layer, "
                               "which cannot be rebuilt as a streaming model; build it as a Functional or Sequential "
                               "model")
    twins = {id(layer): _stateless_copy(layer) for layer, _ in found}
    state_in, state_out, records = [], [], []
    used = {_input_name(t): "an input of the model" for t in model.inputs}  # each state input's name: once

    def call(layer, *args, **kwargs):
        if id(layer) not in twins:
            return layer(*args, **kwargs)
        if kwargs.get("initial_state") is not None:
            raise UnsupportedError(f"layer {layer.name} ({type(layer).__name__}): stateful=True and given "
                                   "initial_state by the model; one or the other")
        if any(r["layer"] == layer.name for r in records):
            raise UnsupportedError(f"layer {layer.name} ({type(layer).__name__}): stateful=True and called more than "
                                   "once, so its states are not one stream")
        if hasattr(layer, "forward_layer"):  # a Bidirectional: the forward layer's states, then the backward's
            states = [s for rnn, way in zip(_halves(layer), ("forward", "backward"))
                      for s in _state_inputs(rnn.cell, f"{layer.name}_{way}")]
        else:
            states = _state_inputs(layer.cell, layer.name)  # Keras' structure: [h(, c)], or one such list per cell
        names = [_input_name(t) for t in keras.tree.flatten(states)]
        taken = next((name for name in names if name in used), None)
        if taken:
            raise UnsupportedError(f"layer {layer.name} ({type(layer).__name__}): stateful=True, and {taken}, the "
                                   f"name its state input takes, is already {used[taken]}; rename one of the two")
        used.update({name: f"a state input of layer {layer.name}" for name in names})
        if kwargs.get("mask") is None and args and getattr(args[0], "_keras_mask", None) is not None:
            kwargs["mask"] = args[0]._keras_mask  # Keras passes the input's mask only to a call of one tensor
        result = twins[id(layer)](*args, initial_state=states, **kwargs)
        state_in.extend(keras.tree.flatten(states))
        state_out.extend(keras.tree.flatten(list(result[1:])))  # StackedRNNCells: one list per cell
        records.append({"layer": layer.name, "state_inputs": names})
        return result if layer.return_state else result[0]

    inputs = [keras.Input(batch_shape=(None,) + tuple(t.shape[1:]), dtype=t.dtype, name=_input_name(t))
              for t in model.inputs]
    if type(model).__name__ == "Sequential":
        x = inputs[0]
        for layer in model.layers:
            x = call(layer, x)
        outputs = [x]
    else:
        # the model's graph run on the new inputs, each layer called through call(): what clone_model does with a
        # call_function, except that clone_model builds a model of the original inputs alone, and the state inputs
        # made inside call() would leave its outputs unconnected
        result = model._run_through_graph(inputs, operation_fn=lambda op: op, call_fn=call)
        outputs = keras.tree.flatten(result)  # a dict of outputs in sorted key order
    first = len(outputs)
    for record in records:
        count = len(record["state_inputs"])
        record["state_outputs"] = [f"output_{first + k}" for k in range(count)]
        first += count
    twin = keras.Model(inputs + state_in, outputs + state_out, name=model.name)
    return twin, records


def _input_name(tensor) -> str:
    """The name of the input layer behind ``tensor`` (a Sequential's input tensor is named ``keras_tensor...``)."""
    history = getattr(tensor, "_keras_history", None)
    layer = history[0] if history else None
    return getattr(layer, "name", None) or tensor.name.split(":")[0]


def _kind_states(cell) -> int:
    """How many states a stock cell carries: 2 for an LSTM's (h, c), else 1."""
    return 2 if type(cell).__name__ == "LSTMCell" else 1


def _halves(layer) -> List[Any]:
    """A Bidirectional's forward and backward layers; any other layer alone."""
    return [layer.forward_layer, layer.backward_layer] if hasattr(layer, "forward_layer") else [layer]


def _cells(layer) -> List[Any]:
    """A stateful layer's cells: its one cell, or those of its ``StackedRNNCells`` (nested ones' cells in their
    place), each with states of its own."""
    def leaves(cell):
        return [c for inner in cell.cells for c in leaves(inner)] if is_stack(cell) else [cell]

    return leaves(layer.cell)


def _state_inputs(cell, prefix):
    """The state inputs of a stateful layer's ``cell`` as Keras structures them: [h(, c)] named ``{prefix}_h``
    (``_c``), for a StackedRNNCells one such list per cell k named ``{prefix}_cell{k}``, nested ones likewise."""
    # lazy: Keras, loaded on first use (import cudnn_port stays light)
    import keras

    if is_stack(cell):
        return [_state_inputs(inner, f"{prefix}_cell{k}") for k, inner in enumerate(cell.cells)]
    kinds = ("h", "c")[:_kind_states(cell)]  # LSTM, RNN(LSTMCell): h and c
    return [keras.Input(batch_shape=(None, cell.units), name=f"{prefix}_{kind}") for kind in kinds]


def _stateless_copy(layer):
    """A copy of stateful layer ``layer`` with ``stateful=False, return_state=True``, its weights copied (a
    Bidirectional's: both of its layers so)."""
    config = layer.get_config()
    if hasattr(layer, "forward_layer"):
        for key in ("layer", "backward_layer"):
            if config.get(key):
                config[key] = dict(config[key], config=dict(config[key]["config"], stateful=False, return_state=True))
    else:
        config = dict(config, stateful=False, return_state=True)
    copy = type(layer).from_config(config)
    copy.build((None, None, int(_cells(_halves(layer)[0])[0].kernel.shape[0])))
    copy.set_weights(layer.get_weights())
    return copy
