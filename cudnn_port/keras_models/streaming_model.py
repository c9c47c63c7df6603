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

A stateful layer the model gives ``initial_state`` starts every call from those states (Keras reads the states it
keeps only when a call gives none), so it is its stateless twin, with no state inputs or outputs of its own; its
record says ``given_initial_state``.

A stateful layer inside a nested Functional or Sequential model streams too: the twin runs the nested model's graph
in its own, each layer in its place (the nested model is not kept as one layer), so the states are inputs and outputs
of the whole model.

A stateful ``Bidirectional`` whose states Keras' own ``Bidirectional`` cannot take back as ``initial_state`` (it gives
each direction half of the list: an LSTM in one direction only, or ``StackedRNNCells``, whose states nest per cell) is
its two stateless layers called apart, each with its own states, then merged as Keras merges (:func:`_pair_call`).

Refused in one line: a stateful layer of a cell other than Keras' own, or of a ``StackedRNNCells`` holding another
(Keras cannot build the stateless twin of nested states), and a stateful layer in a subclassed model.
"""
import re
from typing import TYPE_CHECKING, Any, Dict, List, Tuple

from ..errors import UnsupportedError
from .keras_cells import (cell_kind, cell_leaves, is_stack, layer_halves, state_count, stateful_holders,
                          stateful_layers)

if TYPE_CHECKING:
    import keras

WAYS = ("forward", "backward")  # a stateful Bidirectional's directions, in its states' order


def streaming_twin(model: "keras.Model") -> Tuple["keras.Model", List[Dict[str, Any]]]:
    """(``model`` itself and [] when no layer of it is stateful; else the streaming model described in the module
    docstring and one record per stateful layer: {layer, state_inputs, state_outputs (the output names every
    artifact gives them: ``output_k``)}). Raises :class:`~cudnn_port.errors.UnsupportedError` for what does not
    stream."""
    # lazy: Keras, loaded on first use (import cudnn_port stays light)
    import keras

    found = list(stateful_layers(model))
    if not found:
        return model, []
    for layer in found:
        if any(is_stack(rnn.cell) and any(map(is_stack, rnn.cell.cells)) for rnn in layer_halves(layer)):
            raise UnsupportedError(f"layer {layer.name} ({type(layer).__name__}): stateful=True with a "
                                   "StackedRNNCells inside its StackedRNNCells, whose nested states Keras cannot "
                                   "build a functional model around; put all the cells in one StackedRNNCells")
        other = next((c for rnn in layer_halves(layer) for c in cell_leaves(rnn) if cell_kind(c) is None), None)
        if other is not None:
            raise UnsupportedError(f"layer {layer.name} ({type(layer).__name__}): stateful=True with a "
                                   f"{type(other).__name__} cell, which has no fused form (only Keras' LSTMCell, "
                                   "GRUCell and SimpleRNNCell)")
    holders = stateful_holders(model)  # nested models on the way to a stateful layer: their graphs run in the twin's
    for held in [model] + list(holders.values()):
        if type(held).__name__ not in ("Functional", "Sequential"):
            raise UnsupportedError(f"model {held.name} is a subclassed {type(held).__name__} with a stateful layer, "
                                   "which cannot be rebuilt as a streaming model; build it as a Functional or "
                                   "Sequential model")
    twins = {id(layer): _stateless_copy(layer) for layer in found if not _split(layer)}
    pairs = {id(layer): [_stateless_copy(rnn, f"{layer.name}_{way}") for rnn, way in zip(layer_halves(layer), WAYS)]
             for layer in found if _split(layer)}  # named {layer}_forward / _backward, as the judge finds them
    state_in: List[Any] = []
    state_out: List[Any] = []
    records: List[Dict[str, Any]] = []
    used = {_input_name(t): "an input of the model" for t in model.inputs}  # each state input's name: once

    def call(layer, *args, **kwargs):
        if id(layer) in holders:  # a nested model: its layers called here, in the twin's graph
            return _through(layer, call, args, kwargs)
        if id(layer) not in twins and id(layer) not in pairs:
            return layer(*args, **kwargs)
        if any(r["layer"] == layer.name for r in records):
            raise UnsupportedError(f"layer {layer.name} ({type(layer).__name__}): stateful=True and called more than "
                                   "once, so its states are not one stream")
        if kwargs.get("mask") is None and args and getattr(args[0], "_keras_mask", None) is not None:
            kwargs["mask"] = args[0]._keras_mask  # Keras passes the input's mask only to a call of one tensor
        if kwargs.get("initial_state") is not None:  # Keras starts from these, never from the states it keeps
            given = kwargs.pop("initial_state")
            if id(layer) in pairs:  # as Keras' Bidirectional splits them: half to each direction
                halves = [given[:len(given) // 2], given[len(given) // 2:]]
                result = _pair_call(layer, pairs[id(layer)], halves, args, kwargs)
            else:
                result = twins[id(layer)](*args, initial_state=given, **kwargs)
            records.append({"layer": layer.name, "state_inputs": [], "state_outputs": [], "given_initial_state": True})
            return result if layer.return_state else _outputs(layer, result)
        if hasattr(layer, "forward_layer"):  # a Bidirectional: the forward layer's states, then the backward's
            halves = [_state_inputs(rnn.cell, f"{layer.name}_{way}") for rnn, way in zip(layer_halves(layer), WAYS)]
            states = halves[0] + halves[1]
        else:
            states = _state_inputs(layer.cell, layer.name)  # Keras' structure: [h(, c)], or one such list per cell
        names = [_input_name(t) for t in keras.tree.flatten(states)]
        taken = next((name for name in names if name in used), None)
        if taken:
            raise UnsupportedError(f"layer {layer.name} ({type(layer).__name__}): stateful=True, and {taken}, the "
                                   f"name its state input takes, is already {used[taken]}; rename one of the two")
        used.update({name: f"a state input of layer {layer.name}" for name in names})
        if id(layer) in pairs:
            result = _pair_call(layer, pairs[id(layer)], halves, args, kwargs)
        else:
            result = twins[id(layer)](*args, initial_state=states, **kwargs)
        state_in.extend(keras.tree.flatten(states))
        state_out.extend(keras.tree.flatten(list(result[len(keras.tree.flatten(_outputs(layer, result))):])))
        records.append({"layer": layer.name, "state_inputs": names})
        return result if layer.return_state else _outputs(layer, result)

    inputs = [keras.Input(batch_shape=(None,) + tuple(t.shape[1:]), dtype=t.dtype, name=_input_name(t))
              for t in model.inputs]
    if type(model).__name__ == "Sequential":
        outputs = [_through(model, call, inputs, {})]
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
    try:
        twin = keras.Model(inputs + state_in, outputs + state_out, name=model.name)
    except ValueError as error:  # a nested model's layers, now in the outer graph, take a name the outer one has
        taken = re.search(r'The name "([^"]+)" is used \d+ times', str(error))
        if not taken or not holders:
            raise
        raise UnsupportedError(f"model {model.name}: its nested model {next(iter(holders.values())).name} holds a "
                               f"stateful layer, so the streaming model runs that model's layers in its own graph, "
                               f"where two layers are named {taken.group(1)!r}; rename one of them") from None
    return twin, records


def _outputs(layer, result):
    """The outputs in a stateless twin's ``result`` (outputs, then states): a ``Bidirectional`` with
    ``merge_mode=None`` returns two, [forward, backward]; any other layer one."""
    return list(result[:2]) if hasattr(layer, "forward_layer") and layer.merge_mode is None else result[0]


def _split(layer) -> bool:
    """Whether a stateful ``Bidirectional``'s states cannot pass through Keras' own ``Bidirectional`` as
    ``initial_state``, which gives each direction half of the list: an LSTM in one direction only (its states are
    not half of the list), or an ``RNN(StackedRNNCells)`` (its states nested per cell)."""
    if not hasattr(layer, "forward_layer"):
        return False
    halves = layer_halves(layer)
    return any(is_stack(rnn.cell) for rnn in halves) or len({state_count(rnn.cell) for rnn in halves}) > 1


def _pair_call(layer, pair, states, args, kwargs):
    """Keras' ``Bidirectional.call`` of stateful ``layer`` (Keras 3.15, the path without a fused kernel), its two
    stateless twins ``pair`` each given its own ``states``: the backward layer's sequences flipped back in time, then
    ``merge_mode`` (a :func:`_merge` layer, which passes the mask on as the Bidirectional's ``compute_mask`` does);
    [output(s), forward states..., backward states...]."""
    forward, backward = (rnn(*args, initial_state=half, **kwargs) for rnn, half in zip(pair, states))
    merged = _merge(layer)([forward[0], backward[0]])
    return (list(merged) if layer.merge_mode is None else [merged]) + list(forward[1:]) + list(backward[1:])


def _merge(layer):
    """A layer merging [forward output, backward output] as ``Bidirectional`` ``layer`` does."""
    # lazy: Keras, loaded on first use (import cudnn_port stays light)
    import keras

    class Merge(keras.layers.Layer):
        def __init__(self, mode, sequences, **kw):
            super().__init__(**kw)
            self.mode, self.sequences, self.supports_masking = mode, sequences, True

        def call(self, inputs, mask=None):
            ops = keras.ops
            y, y_rev = inputs
            if self.sequences:
                y_rev = ops.flip(y_rev, axis=1)
            if self.mode == "concat":
                return ops.concatenate([y, y_rev], axis=-1)
            if self.mode == "sum":
                return y + y_rev
            if self.mode == "ave":
                return (y + y_rev) / 2
            if self.mode == "mul":
                return y * y_rev
            return [y, y_rev]

        def compute_mask(self, inputs, mask=None):
            kept = (mask[0] if isinstance(mask, (list, tuple)) else mask) if self.sequences else None
            return [kept, kept] if self.mode is None else kept

    return Merge(layer.merge_mode, bool(layer.return_sequences), name=f"{layer.name}_merge")


def _through(model, call, args, kwargs):
    """``model`` (Functional or Sequential) called on ``args[0]`` with each of its layers called through ``call``:
    its graph inlined into the graph being built, as Keras' own call runs it (a Sequential's layers in turn; a
    Functional's graph with the masks it is given set on its inputs)."""
    # lazy: Keras, loaded on first use (import cudnn_port stays light)
    import keras
    from keras.src import backend

    if type(model).__name__ == "Sequential":
        x = args[0]
        for layer in model.layers:
            x = call(layer, x)
        return x
    inputs = model._standardize_inputs(args[0])
    masks = kwargs.get("mask")
    for x, mask in zip(inputs, keras.tree.flatten(masks) if masks is not None else []):
        if mask is not None:
            backend.set_keras_mask(x, mask)
    result = model._run_through_graph(inputs, operation_fn=lambda op: op, call_fn=call)
    return result[0] if isinstance(result, (list, tuple)) and len(result) == 1 else result


def _input_name(tensor) -> str:
    """The name of the input layer behind ``tensor`` (a Sequential's input tensor is named ``keras_tensor...``)."""
    history = getattr(tensor, "_keras_history", None)
    layer = history[0] if history else None
    return getattr(layer, "name", None) or tensor.name.split(":")[0]


def _state_inputs(cell, prefix):
    """The state inputs of a stateful layer's ``cell`` as Keras structures them: [h(, c)] named ``{prefix}_h``
    (``_c``), for a StackedRNNCells one such list per cell k named ``{prefix}_cell{k}``, nested ones likewise."""
    # lazy: Keras, loaded on first use (import cudnn_port stays light)
    import keras

    if is_stack(cell):
        return [_state_inputs(inner, f"{prefix}_cell{k}") for k, inner in enumerate(cell.cells)]
    kinds = ("h", "c")[:state_count(cell)]  # LSTM, RNN(LSTMCell): h and c
    return [keras.Input(batch_shape=(None, cell.units), name=f"{prefix}_{kind}") for kind in kinds]


def _stateless_copy(layer, name=None):
    """A copy of stateful layer ``layer`` with ``stateful=False, return_state=True``, its weights copied (a
    Bidirectional's: both of its layers so), named ``name`` (default: as ``layer``)."""
    config = dict(layer.get_config(), **({"name": name} if name else {}))
    if hasattr(layer, "forward_layer"):
        for key in ("layer", "backward_layer"):
            if config.get(key):
                config[key] = dict(config[key], config=dict(config[key]["config"], stateful=False, return_state=True))
    else:
        config = dict(config, stateful=False, return_state=True)
    copy = type(layer).from_config(config)
    copy.build((None, None, int(cell_leaves(layer_halves(layer)[0])[0].kernel.shape[0])))
    copy.set_weights(layer.get_weights())
    return copy
