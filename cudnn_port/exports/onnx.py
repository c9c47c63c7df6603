"""ONNX model of one stack: fused ``LSTM`` / ``GRU`` / ``RNN`` nodes, ``sequence_lens`` wired (a cell of functions
OpenVINO's fused nodes do not run: Scan loops of the same math, :mod:`cudnn_port.exports.onnx_scan`).

The written models use the portable form of :mod:`cudnn_port.exports.onnx_portable` (right whether a runtime
honours ``sequence_lens``, as onnxruntime does, or not, as OpenVINO on dynamic shapes does not). The plain form
(:func:`stack_graph`, also used for cuDNN nodes inside whole graphs), with x batch-major as in every artifact::

    X_0 = Transpose(inputs, [1, 0, 2])                                  [T, B, I]
    for layer l:
        Y, Y_h[, Y_c] = LSTM|GRU(X_l, W_l, R_l, B_l, sequence_lengths, initial_h[lD:(l+1)D][, initial_c[...]])
        X_{l+1} = Reshape(Transpose(Y, [0, 2, 1, 3]), [0, 0, -1])     [T, D, B, H] -> [T, B, D*H]
                  (one direction: Squeeze(Y, [1]))
    outputs = Transpose(X_L, [1, 0, 2]);  final_h = Concat(Y_h over layers) (one layer: Y_h)

Weights: LSTM gates i, o, f, c (``gates.ONNX_LSTM``), ``B = [b_W, b_R]``; GRU gates z, r, h with
``linear_before_reset=1`` (cuDNN's reset-after form). Written with IR version 8 / opset 17, which onnxruntime
accepts.

Two models per stack, both with every weight an initializer that is not a graph input (nothing a feed could
override, nothing onnxruntime warns about at load):

* ``model.onnx`` (``states=False``) takes exactly ``inputs`` and ``sequence_lengths``; its LSTM / GRU nodes get no
  initial states, so they start from zeros (the ONNX default).
* ``model_stateful.onnx`` (``states=True``) also takes ``initial_h`` (and ``initial_c``) ``[L*D, B, H]`` as
  required inputs: a caller carries the final states of one chunk into the next (streaming).

Both record in ``metadata_props`` (:func:`metadata`) the state inputs and outputs, their shape and what a chunk is.

ONNX's LSTM has no projection: a stack with one gets no ONNX artifact (:class:`~cudnn_port.errors.UnsupportedError`).
"""
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Tuple

import numpy as np

from ..errors import UnsupportedError
from . import io_names
from .onnx_portable import fused_node, layer_weights, portable_stack_graph
from .onnx_guard import guard_empty
from .onnx_scan import sequence_nodes_expanded

if TYPE_CHECKING:
    import onnx
    from ..canonical import CanonicalRNN
    from ..layout import RNNSpec

OPSET = 17
IR_VERSION = 8


def cannot_hold(spec: "RNNSpec") -> Optional[str]:
    """Why ONNX cannot hold a stack of ``spec`` (None if it can): the one statement of it, which the format registry,
    the graph road and the writers all ask."""
    return "ONNX's LSTM has no projection" if spec.num_proj else None


def first_refusal(named_specs: Iterable[Tuple[str, "RNNSpec"]]) -> Optional[str]:
    """"name: why" of the first of ``(name, spec)`` that ONNX cannot hold (:func:`cannot_hold`), or None."""
    return next((f"{name}: {why}" for name, why in ((n, cannot_hold(s)) for n, s in named_specs) if why), None)


def stack_graph(canon: "CanonicalRNN", x: str, lengths: str, h0: Optional[str], c0: Optional[str],
                node: Callable[..., Any],
                const: Callable[[str, np.ndarray], str], prefix: str = "",
                weights: Optional[Callable[[int], Tuple[str, str, str]]] = None) -> Tuple[str, str, Optional[str]]:
    """The stack's ONNX nodes, made through ``node(op, inputs, outputs, **attrs)`` and ``const(name, array) ->
    tensor name``: x time-major [T, B, I], lengths [B] int32 (or "" for full length), h0 / c0 [L*D, B, H] (c0
    LSTM only; both None: the nodes start from zeros). Returns the names of y [T, B, D*H], final_h and final_c
    (None for GRU). ``weights(layer)``, if given, returns the names of that layer's W, R, B tensors (computed in
    the graph) instead of constants. This is the plain form, right where ``sequence_lens`` is honoured
    (onnxruntime); :func:`cudnn_port.exports.onnx_portable.portable_stack_graph` is right in OpenVINO too."""
    spec = canon.spec
    D, is_lstm = spec.num_dirs, spec.mode == "lstm"
    op, attrs = fused_node(spec, D)
    flatten = const(f"{prefix}flatten_dirs", np.array([0, 0, -1] if D == 2 else [1], np.int64))  # Reshape / Squeeze
    axis = const(f"{prefix}axis_0", np.array([0], np.int64)) if h0 is not None else None
    finals_h, finals_c = [], []
    for layer in range(spec.num_layers):
        W, R, B = weights(layer) if weights else (const(f"{prefix}{n}_{layer}", a)
                                                  for n, a in zip("WRB", layer_weights(canon, layer)))
        if h0 is not None:
            start = const(f"{prefix}start_{layer}", np.array([layer * D], np.int64))
            end = const(f"{prefix}end_{layer}", np.array([(layer + 1) * D], np.int64))
        states = []
        for label, state in (("h0", h0), ("c0", c0)) if is_lstm else (("h0", h0),):
            if state is not None and spec.num_layers == 1:  # the whole state is this layer's
                states.append(state)
            elif state is not None:  # None: the node's own default, zeros
                states.append(node("Slice", [state, start, end, axis], [f"{prefix}{label}_{layer}"]))
        outs = [f"{prefix}y_{layer}", f"{prefix}y_h_{layer}"] + ([f"{prefix}y_c_{layer}"] if is_lstm else [])
        node(op, [x, W, R, B, lengths] + states, outs, **attrs)
        if D == 1:  # [T, 1, B, H]: drop the direction axis, no copy
            x = node("Squeeze", [outs[0], flatten], [f"{prefix}x_{layer + 1}"])
        else:
            y = node("Transpose", [outs[0]], [f"{prefix}y_t_{layer}"], perm=[0, 2, 1, 3])
            x = node("Reshape", [y, flatten], [f"{prefix}x_{layer + 1}"])
        finals_h.append(outs[1])
        if is_lstm:
            finals_c.append(outs[2])
    if spec.num_layers == 1:  # one layer's states are the stack's
        return x, finals_h[0], finals_c[0] if is_lstm else None
    final_h = node("Concat", finals_h, [f"{prefix}h_n"], axis=0)
    final_c = node("Concat", finals_c, [f"{prefix}c_n"], axis=0) if is_lstm else None
    return x, final_h, final_c



def metadata(spec: "RNNSpec", states: bool) -> dict:
    """``metadata_props`` of a stack's ONNX model: what it is, and for ``states`` which inputs and outputs carry the
    recurrent state, their shapes, and what one call (a chunk) is. Flat string key/values, as streaming exports
    record their state (icefall / sherpa-onnx: ``model_type``, sizes, ``comment``)."""
    names_in, names_out = io_names(spec)
    layers, H = spec.num_pseudo_layers, spec.num_units
    meta = {"model_type": spec.mode, "producer": "cudnn-port", "num_layers": spec.num_layers,
            "num_directions": spec.num_dirs, "hidden_size": H, "input_size": spec.input_size,
            "inputs": "inputs [batch, time, input_size] float32; sequence_lengths [batch] int32",
            "outputs": f"outputs [batch, time, {spec.num_dirs * H}] float32, zero past each length",
            "state_inputs": ",".join(names_in[2:]) if states else "",
            "state_outputs": ",".join(names_out[1:]),
            "state_shape": f"{layers},batch,{H}",
            "state_layout": "index l*num_directions + d: layer l, direction d (0 forward, 1 backward)"}
    if states:
        meta["chunk"] = ("one call: any time steps of the same sequences; feed the final states of one chunk as the "
                         "initial states of the next" + (" (forward direction only: a bidirectional stack reads the "
                                                         "whole sequence, so it does not stream)"
                                                         if spec.num_dirs == 2 else ""))
        meta["streaming"] = int(spec.num_dirs == 1)
    else:
        meta["chunk"] = "the whole sequence, from zero initial states; model_stateful.onnx takes and returns states"
    return {k: str(v) for k, v in meta.items()}


def build_model(canon: "CanonicalRNN", name: str = "rnn", states: bool = False,
                portable: bool = True) -> "onnx.ModelProto":
    """The ONNX ModelProto of stack ``canon`` (see the module docstring): ``states`` False takes ``inputs`` and
    ``sequence_lengths`` only (zero initial states); True also ``initial_h`` (and ``initial_c``), required.
    ``portable`` False: the nodes of :func:`stack_graph` instead (right only where ``sequence_lens`` is honoured,
    i.e. not in OpenVINO; kept to compare against)."""
    # lazy: onnx, loaded on first use (import cudnn_port stays light)
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    spec = canon.spec
    if cannot_hold(spec):
        raise UnsupportedError(f"{cannot_hold(spec)}, so a {spec.describe()} has no ONNX form")
    H, D, is_lstm = spec.num_units, spec.num_dirs, spec.mode == "lstm"
    names_in, names_out = io_names(spec)
    state_shape = [spec.num_pseudo_layers, "batch", H]
    shapes = {"inputs": (TensorProto.FLOAT, ["batch", "time", spec.input_size]),
              "sequence_lengths": (TensorProto.INT32, ["batch"]),
              "outputs": (TensorProto.FLOAT, ["batch", "time", D * H])}
    graph_inputs = [helper.make_tensor_value_info(n, *shapes.get(n, (TensorProto.FLOAT, state_shape)))
                    for n in (names_in if states else names_in[:2])]
    nodes, inits = [], []

    def node(op, inputs, outputs, **attrs):
        nodes.append(helper.make_node(op, inputs, outputs, name=outputs[0] if op in ("LSTM", "GRU") else "", **attrs))
        return outputs[0]

    def const(const_name, value):
        inits.append(numpy_helper.from_array(value, const_name))
        return const_name

    x = node("Transpose", ["inputs"], ["x_0"], perm=[1, 0, 2])
    h0, c0 = (names_in[2], names_in[3] if is_lstm else None) if states else (None, None)
    y, final_h, final_c = (portable_stack_graph if portable else stack_graph)(canon, x, "sequence_lengths", h0, c0,
                                                                              node, const)
    node("Transpose", [y], ["outputs"], perm=[1, 0, 2])
    node("Identity", [final_h], ["final_h"])
    if is_lstm:
        node("Identity", [final_c], ["final_c"])
    graph_outputs = [helper.make_tensor_value_info(n, *shapes.get(n, (TensorProto.FLOAT, state_shape)))
                     for n in names_out]
    graph = helper.make_graph(nodes, name, graph_inputs, graph_outputs, initializer=inits)
    sequence_nodes_expanded(graph)  # activations OpenVINO's sequence ops do not run: Scan loops
    model = helper.make_model(graph, producer_name="cudnn-port", opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    helper.set_model_props(model, metadata(spec, states))
    guard_empty(model, "sequence_lengths")  # onnxruntime aborts the process on an empty batch
    onnx.checker.check_model(model)
    return model


def write_onnx(canon: "CanonicalRNN", path: str, name: str = "rnn", states: bool = False) -> None:
    """Save :func:`build_model` at ``path`` (weights inside the file)."""
    # lazy: onnx, loaded on first use (import cudnn_port stays light)
    import onnx

    onnx.save(build_model(canon, name, states), str(path))
