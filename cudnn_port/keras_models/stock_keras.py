"""Stock Keras 3 recurrent layers into fused stacks: the front door for models of ``LSTM``, ``GRU``, ``SimpleRNN``,
``Bidirectional``.

:func:`rewrite` returns an equivalent model in which each stock layer whose math cuDNN computes (the conditions Keras
checks before it picks cuDNN: ``activation="tanh"``, ``recurrent_activation="sigmoid"``, ``GRU(reset_after=True)``, and
``GRU(reset_after=False)``, which cuDNN does not compute but the same buffer holds: its fused layer runs CPU ops only,
its ONNX node is ``GRU`` with ``linear_before_reset=0``; a ``SimpleRNN`` with ``activation`` ``"tanh"`` or ``"relu"``,
cuDNN's ``RNN_TANH`` / ``RNN_RELU``; ``use_bias=False`` is cuDNN's math with zero biases, ``unroll=True`` computes the
same steps without a loop, and dropout does nothing at inference) is a :class:`~.stock_adapter.StockAdapter`
around a fused layer holding the same weights: Keras' kernels are the canonical weights
(:func:`cudnn_port.targets.keras.read`, packed by :func:`cudnn_port.layout.pack`). ``Dense``, ``Reshape``,
``RepeatVector`` and ``TimeDistributed`` are recomputed with ops LiteRT sizes before the model runs, and without Keras'
per-step loop (:mod:`.sized_layers`); a ``TimeDistributed`` of a recurrent layer (or of a model holding one)
runs its fused form once on ``[batch * time, steps, ...]``, which computes each sequence alone as Keras' per-step
calls do. Every other layer is the user's own layer object, reused (nested
Functional / Sequential models are rebuilt around them). The rewritten model then takes the whole-model road
(:mod:`cudnn_port.roads.model`), which judges it against the ORIGINAL model: Keras' own outputs.

``RNN(LSTMCell(64))`` is ``LSTM(64)`` and converts as it; ``RNN(StackedRNNCells([...]))`` of such cells is a
:class:`~.stock_adapter.StackedAdapter`, one adapter (and fused stack) per cell, and a ``Bidirectional`` of
one a :class:`~.stock_adapter.StackedPairAdapter` of two.

A ``stateful=True`` layer is made stateless first, its states inputs and outputs of the model
(:mod:`.streaming_model`). Refused with one line naming the layer and the reason: every other recurrent
layer (a function outside :data:`~cudnn_port.layout.ACTIVATIONS`, such as ``glu`` or the user's own;
``ConvLSTM*``; ``RNN`` of a cell other than Keras' ``LSTMCell``, ``GRUCell`` and ``SimpleRNNCell``, or of
``StackedRNNCells`` holding one), a stateful layer inside ``TimeDistributed`` (Keras carries its states from one
outer step to the next), and stock recurrent layers inside a subclassed model (not Functional / Sequential), which
cannot be rebuilt. There is no general path: Keras' own loop, left in the model,
traces to TensorList ops that tf2onnx cannot convert and TFLite holds only as Flex ops, so its artifacts would not be
the same set.

"""
import collections
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

from ..errors import UnsupportedError
from ..layout import ACTIVATIONS, GATE_ACTIVATIONS
from .stock_fused import adapter, stacked, stock_kind, two_stacks
from .streaming_model import cell_kind, is_stack

if TYPE_CHECKING:
    import keras

FUSED, REFUSED = "fused", "refused"
RECURRENT = ("LSTM", "GRU", "SimpleRNN", "RNN", "ConvLSTM1D", "ConvLSTM2D", "ConvLSTM3D", "Bidirectional")


def _why_not(layer) -> Optional[str]:
    """Why a stock LSTM / GRU / SimpleRNN (or RNN of such a cell, or of StackedRNNCells of such cells) has no fused
    form (None: it has)."""
    if stacked(layer):
        return _stack_why_not(layer.cell, "")
    name = stock_kind(layer)
    if name is None:
        if type(layer).__name__ == "RNN":
            return f"RNN of a {type(layer.cell).__name__} cell (only Keras' LSTMCell, GRUCell and SimpleRNNCell)"
        return f"{type(layer).__name__} is not a cuDNN layer"
    return _functions_why_not(layer.cell, name)


def _stack_why_not(stack, where) -> Optional[str]:
    """Why a StackedRNNCells (nested ones included: cell ``k.j``) has no fused form (None: it has)."""
    for k, cell in enumerate(stack.cells):
        if is_stack(cell):
            why = _stack_why_not(cell, f"{where}{k}.")
        elif cell_kind(cell) is None:
            why = f"cell {where}{k} of its StackedRNNCells is a {type(cell).__name__} (only Keras' LSTMCell, " \
                  "GRUCell and SimpleRNNCell)"
        else:
            why = _functions_why_not(cell, cell_kind(cell))
            why = why and f"cell {where}{k} of its StackedRNNCells has {why}"
        if why:
            return why
    return None


def _functions_why_not(cell, name) -> Optional[str]:
    """Why a stock cell's functions have no fused form (None: they have)."""
    config = cell.get_config()  # the cell's: LSTM(...) keeps its units and functions on its cell too

    def named(key):  # Keras' name of a function; a registered function of the user's own as 'package>name'
        value = config.get(key)
        return value.get("config", value) if isinstance(value, dict) else value

    if named("activation") not in ACTIVATIONS:
        return f"activation={named('activation')!r} (the fused forms compute {', '.join(ACTIVATIONS)})"
    if name != "SimpleRNN" and named("recurrent_activation") not in GATE_ACTIVATIONS:
        return (f"recurrent_activation={named('recurrent_activation')!r} (the fused forms' gates are one of "
                f"{', '.join(GATE_ACTIVATIONS)})")
    return None


def classify(layer: "keras.layers.Layer") -> Optional[Dict[str, Any]]:
    """{layer, type, verdict (fused / refused), why} for a stock recurrent layer; None otherwise."""
    kind = type(layer).__name__
    if kind == "TimeDistributed" and _recurrent_inside(layer.layer) and not _nested(unwrapped(layer)):
        row = classify(layer.layer)  # TimeDistributed(LSTM): the layer run on [batch * time, steps, ...]
        if row is None:  # a layer of the user's own class that holds a recurrent one
            return {"layer": layer.name, "type": kind, "verdict": REFUSED,
                    "why": f"it wraps a {type(layer.layer).__name__}, a layer of its own class that holds "
                           f"{_recurrent_inside(layer.layer)}, which cannot be rebuilt around a fused layer"}
        row = dict(row, layer=layer.name, type=f"{kind}({row['type']})")
        if row["verdict"] == FUSED and "stateful" in row["why"]:
            return dict(row, verdict=REFUSED, why="it wraps a stateful=True layer, whose states Keras carries from "
                                                  "one of the wrapper's steps to the next; build it stateless")
        return row if row["verdict"] == REFUSED else dict(row, why="its steps run as one batch of sequences")
    if kind not in RECURRENT or not type(layer).__module__.startswith("keras."):
        return None
    row = {"layer": layer.name, "type": kind, "verdict": FUSED, "why": ""}
    inner = [layer.forward_layer, layer.backward_layer] if kind == "Bidirectional" else [layer]
    stateful = any(getattr(rnn, "stateful", False) for rnn in inner)
    why = next((w for w in map(_why_not, inner) if w), None)
    if stateful and why is None:  # streaming_model makes it a stateless layer, states in and out
        return dict(row, why="stateful=True: streamed, its states are inputs and outputs")
    if why is None and kind == "Bidirectional" and two_stacks(layer):
        return dict(row, why="its directions differ: each a stack of its own")
    return dict(row, verdict=REFUSED, why=f"{why}, so it has no fused form") if why else row


REBUILT = ("Functional", "Sequential")  # the models clone_model rebuilds around new layers


def _walk(model, prefix="", folded=False):
    """(row, layer) for each stock recurrent layer inside ``model``, nested models included; one inside a model
    that is not Functional / Sequential (a subclassed one, which cannot be rebuilt) is refused, and so is a stateful
    one in a model inside ``TimeDistributed`` (``folded``)."""
    # lazy: Keras, loaded on first use (import cudnn_port stays light)
    from ..layers import CudnnRNN
    from .stock_adapter import StackedAdapter, StackedPairAdapter, StockAdapter

    for layer in getattr(model, "layers", None) or []:
        if getattr(layer, "layers", None) and not isinstance(layer, (CudnnRNN, StockAdapter, StackedAdapter,
                                                                     StackedPairAdapter)):
            yield from _walk(layer, f"{prefix}{layer.name}/", folded)
            continue
        if type(layer).__name__ == "TimeDistributed" and _nested(unwrapped(layer)):  # its model's: td/model/...
            yield from _walk(unwrapped(layer), f"{prefix}{layer.name}/{unwrapped(layer).name}/", True)
            continue
        row = classify(layer)
        if row and row["verdict"] == FUSED and folded and "stateful" in row["why"]:
            row.update(verdict=REFUSED, why="stateful=True in a model inside TimeDistributed, which carries its "
                                            "states from one of the wrapper's steps to the next; build it stateless")
        if row and row["verdict"] == FUSED and type(model).__name__ not in REBUILT:
            row.update(verdict=REFUSED, why=f"it sits in {model.name}, a subclassed {type(model).__name__}, which "
                                            "cannot be rebuilt around a fused layer; build it as a Functional or "
                                            "Sequential model")
        if row:
            yield dict(row, layer=prefix + row["layer"]), layer


def plan(model: "keras.Model") -> List[Dict[str, Any]]:
    """One row per stock recurrent layer of ``model`` (nested models included, ``outer/inner`` names): what
    :func:`rewrite` does with it and why."""
    return [row for row, _ in _walk(model)]


def rewrite(model: "keras.Model", say: Optional[Callable[[str], None]] = None, strict: bool = True,
            sized: bool = True) -> "keras.Model":
    """``model`` itself when it holds no stock layer to fuse or to size (:mod:`.sized_layers`: ``Dense``,
    ``Reshape``, ``RepeatVector``, ``TimeDistributed``); else an equivalent Functional / Sequential model whose
    eligible stock layers are fused and sized (``sized=False``: those left as they are, for a judge run in Keras;
    the other layers are shared with ``model``, which is left unchanged). Raises
    :class:`~cudnn_port.errors.UnsupportedError` naming a refused layer and why (``strict=False``: such a layer is
    left as it is, for ``inspect``'s report)."""
    # lazy: Keras, loaded on first use (import cudnn_port stays light)
    import keras

    rows = list(_walk(model))
    for row, layer in rows:
        if row["verdict"] == REFUSED and strict:
            raise UnsupportedError(f"layer {row['layer']} ({row['type']}): {row['why']}")
        if row["verdict"] == FUSED and getattr(layer, "stateful", False):  # export streams it first
            raise UnsupportedError(f"layer {row['layer']} ({row['type']}): stateful=True; make the model a "
                                   "streaming one first (cudnn_port.keras_models.streaming_model.streaming_twin)")
    for row, _ in rows:
        if row["verdict"] == FUSED and say:
            say(f"stock layer {row['layer']} ({row['type']}) becomes a fused stack")
    from .sized_layers import sized as sized_form

    fused = {id(layer) for row, layer in rows if row["verdict"] == FUSED}
    replaced = {id(layer): form for layer in (_layers(model) if sized else ()) if id(layer) not in fused
                for form in [sized_form(layer, _recurrent_inside)] if form is not None}
    if not fused and not replaced:
        return model

    folded = {id(layer): form for layer in _layers(model) if type(layer).__name__ == "TimeDistributed"
              for form in [_time_distributed(layer, fused, sized)] if form is not None}

    def clone(layer):
        if id(layer) in folded:
            return folded[id(layer)]
        return adapter(layer) if id(layer) in fused else replaced.get(id(layer), layer)

    _reserve_names(model)
    return keras.models.clone_model(model, clone_function=clone, recursive=True)


def _reserve_names(model) -> None:
    """Move Keras' auto-naming counters past every operation name in ``model``'s graphs (nested models' too). The
    ops a clone creates (a ``Concatenate`` layer's mask is an ``ops.concatenate``, a new one per call) are named by
    those counters, and Keras' loader resets them between its two passes over a file, so the clone's op could take
    the name of one the loaded graph still holds, and the new model refuses to build ("The name "concatenate_1" is
    used 2 times", measured on Keras 3.15: Embedding(mask_zero) shared by two inputs, Concatenate, Dense, GRU, Add)."""
    # lazy: Keras and its naming state, loaded on first use (import cudnn_port stays light)
    import keras
    from keras.src.backend.common import global_state

    uids = global_state.get_global_attribute("object_name_uids", default=collections.defaultdict(int),
                                             set_to_default=True)
    seen, todo = set(), list(keras.tree.flatten(getattr(model, "outputs", None) or []))
    while todo:
        history = getattr(todo.pop(), "_keras_history", None)
        if history is None or history.operation is None or id(history.operation) in seen:
            continue
        op = history.operation
        seen.add(id(op))
        base, _, number = op.name.rpartition("_")
        base, count = (base, int(number) + 1) if base and number.isdigit() else (op.name, 1)
        uids[base] = max(uids[base], count)
        todo.extend(op._inbound_nodes[history.node_index].input_tensors)
        if isinstance(op, keras.Model):  # a nested model: its own graph too
            todo.extend(keras.tree.flatten(getattr(op, "outputs", None) or []))


def unwrapped(layer: Any) -> Any:
    """The layer inside ``TimeDistributed`` ``layer`` (inside each of nested ones)."""
    while type(layer).__name__ == "TimeDistributed":
        layer = layer.layer
    return layer


def _nested(layer) -> bool:
    """Whether ``layer`` is a model (a Functional, Sequential or subclassed one) rather than one layer."""
    return bool(getattr(layer, "layers", None))


def _time_distributed(layer, fused, sized, name=None):
    """The layer in the place of ``TimeDistributed`` ``layer`` when it holds a layer to fuse (None: keep it): the
    wrapped layer's adapter (named ``name``, default as ``layer``: the judges find a stack by the wrapper's name), or
    its model rewritten, called once on ``[batch * time, ...]`` (:class:`~.sized_layers.TimeFolded`;
    ``sized=False``: Keras' own ``TimeDistributed`` around it, for a judge that shares no sized layer)."""
    # lazy: Keras, loaded on first use (import cudnn_port stays light)
    import keras

    from .sized_layers import TimeFolded

    inner, name = layer.layer, name or layer.name
    if type(inner).__name__ == "TimeDistributed":  # TimeDistributed(TimeDistributed(...)): the inner form, folded again
        new = _time_distributed(inner, fused | ({id(inner)} if id(layer) in fused else set()), sized, name)
        if new is None:
            return None
    elif id(layer) in fused:
        new = adapter(inner, name)
    elif _nested(inner) and type(inner).__name__ in REBUILT and _recurrent_inside(inner):
        new = rewrite(inner, strict=False, sized=sized)
    else:
        return None
    if new is inner:
        return None
    if sized:
        return TimeFolded(layer, inner=new, name=layer.name, dtype=layer.dtype_policy, holds=False)
    judge = keras.layers.TimeDistributed(new, name=layer.name)
    judge.compute_output_shape = layer.compute_output_shape  # the stock layer's shapes: an adapter states none
    return judge


def _recurrent_inside(layer) -> Optional[str]:
    """"an LSTM" (or "a GRU", ...) when ``layer`` is, or holds, a stock recurrent layer; else None."""
    name = type(layer).__name__
    if name in RECURRENT:
        return f"{'an' if name in ('LSTM', 'RNN') else 'a'} {name}"
    inner = list(getattr(layer, "layers", None) or []) + ([layer.layer] if name == "TimeDistributed" else [])
    return next(filter(None, map(_recurrent_inside, inner)), None)


def _layers(model):
    """Every layer of ``model`` and of the models nested in it that clone_model rebuilds (Functional, Sequential)."""
    if type(model).__name__ in REBUILT:
        for layer in model.layers:
            yield layer
            yield from _layers(layer)
