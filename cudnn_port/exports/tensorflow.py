"""SavedModel and frozen GraphDef of one stack, built from :mod:`cudnn_port.tf_graph` with weights as constants.

SavedModel signatures: ``serving_default(inputs, sequence_lengths)`` (zero initial states) and
``with_initial_state(inputs, sequence_lengths, initial_h[, initial_c])``. The frozen GraphDef has placeholders
named after the inputs (``initial_h``/``initial_c`` default to zeros) and Identity nodes named after the outputs.

By default the SavedModel is plain TensorFlow ops, so it loads and serves in every runtime: TensorFlow Serving
with its default flags, the TensorFlow Java bindings and the C API run no XLA-compiled function. ``xla=True``
(``convert --xla``) makes the forward pass one XLA-compiled function (``jit_compile``) instead: about 2-3x faster
at small batches on CPU in Python TensorFlow, where per-op dispatch and matrix-vector products dominate. XLA
compiles once per input shape, so the time axis is then padded up to one of :data:`STEP_BUCKETS` (the loops stop
at the longest sequence, so padding costs only the input projection) and a handful of compilations serve every
length; each new batch size compiles once too (about 1-2 s). The frozen GraphDef is always plain ops.

Both refuse a ``sequence_lengths`` outside [1, time], as the stack's ONNX and TFLite files do: such a length has no
cuDNN meaning. The call fails with TensorFlow's ``InvalidArgumentError`` (TF Serving: an ``INVALID_ARGUMENT``
answer, the server keeps running) naming the node of :data:`LENGTHS_GUARD` (:func:`checked_lengths`).
"""
import os
from types import ModuleType
from typing import TYPE_CHECKING, Dict, List, Mapping, Sequence, Set

from ..deps import import_tf
from ..tf_graph import stack_forward
from . import io_names

if TYPE_CHECKING:
    import tensorflow as tf
    from ..canonical import CanonicalRNN
    from tensorflow.core.framework import graph_pb2


def _named(tf, spec, result):
    outputs, final_h, final_c = result
    named = {"outputs": tf.identity(outputs, name="outputs"), "final_h": tf.identity(final_h, name="final_h")}
    if spec.mode == "lstm":
        named["final_c"] = tf.identity(final_c, name="final_c")
    return named


LENGTHS_GUARD = "sequence_lengths_refused/each_length_must_be_in_1_to_time"
"""The name scope of :func:`checked_lengths`' ops: the error of a refused length names its node."""


def checked_lengths(tf: ModuleType, inputs: "tf.Tensor", lengths: "tf.Tensor") -> "tf.Tensor":
    """``lengths`` [B] unchanged where each lies in [1, T] (T: ``inputs``' axis 1; an empty batch passes); else the
    call fails at a ``GatherV2`` out of bounds (CPU kernels check the index) in :data:`LENGTHS_GUARD`. A data
    dependency, not an ``Assert``: TensorFlow.js runs no ``Assert``, and reads a node's control inputs as data
    inputs; its own gather refuses the index too."""
    with tf.name_scope(LENGTHS_GUARD):
        lengths = tf.cast(lengths, tf.int32)
        steps = tf.shape(inputs)[1]
        bad = tf.reduce_any(tf.logical_or(lengths < 1, lengths > steps))
        zero = tf.gather(tf.zeros([1], tf.int32), tf.reshape(tf.cast(bad, tf.int32), [1]))  # [0], or index 1: fails
        return lengths + zero


STEP_BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
"""Lengths the XLA SavedModel pads the time axis up to; past the last, the next multiple of it."""


def padded_steps(tf: ModuleType, steps: "tf.Tensor") -> "tf.Tensor":
    """The first of :data:`STEP_BUCKETS` >= ``steps`` (a scalar int32 tensor), or the next multiple of the last."""
    table = tf.constant(STEP_BUCKETS, tf.int32)
    top = STEP_BUCKETS[-1]
    index = tf.minimum(tf.searchsorted(table, tf.reshape(steps, [1]))[0], len(STEP_BUCKETS) - 1)
    return tf.where(steps <= top, tf.gather(table, index), (steps + top - 1) // top * top)


def _forward(canon, xla):
    """``stack_forward(canon, ...)`` as the SavedModel runs it: plain ops, or one XLA-compiled function fed
    inputs padded to a bucket of :data:`STEP_BUCKETS` and its outputs cut back to the real length."""
    tf = import_tf()
    if not xla:
        return lambda *args: stack_forward(canon, *args)

    @tf.function(jit_compile=True, autograph=False)
    def compiled(inputs, sequence_lengths, initial_h, initial_c):
        return stack_forward(canon, inputs, sequence_lengths, initial_h, initial_c,
                             until=tf.reduce_max(sequence_lengths))

    def forward(inputs, sequence_lengths, initial_h=None, initial_c=None):
        steps = tf.shape(inputs)[1]
        padded = tf.pad(inputs, [[0, 0], [0, padded_steps(tf, steps) - steps], [0, 0]])
        outputs, final_h, final_c = compiled(padded, sequence_lengths, initial_h, initial_c)
        return outputs[:, :steps], final_h, final_c

    return forward


def build_module(canon: "CanonicalRNN", xla: bool = False) -> "tf.Module":
    """A tf.Module with the two signature functions as concrete functions (weights frozen in); ``xla``: see the
    module doc. The stack is traced once: ``serve_state`` holds it, and ``serve`` calls ``serve_state`` with zero
    states (TensorFlow inlines the call when it runs the graph: the same time at batch 1, 512 units), which halves
    the SavedModel's bytes and its time to write and load. Concrete functions, not ``tf.function`` objects:
    ``tf.saved_model.save`` traces a ``tf.function`` attribute again inside its save context (another key of
    TensorFlow's trace cache)."""
    tf = import_tf()
    forward = _forward(canon, xla)
    spec = canon.spec
    state_h = tf.TensorSpec([spec.num_pseudo_layers, None, spec.state_size], tf.float32)
    state_c = tf.TensorSpec([spec.num_pseudo_layers, None, spec.num_units], tf.float32)
    x_spec = tf.TensorSpec([None, None, spec.input_size], tf.float32, name="inputs")
    len_spec = tf.TensorSpec([None], tf.int32, name="sequence_lengths")
    module = tf.Module()

    if spec.mode == "lstm":
        @tf.function(input_signature=[x_spec, len_spec, _named_spec(tf, state_h, "initial_h"),
                                      _named_spec(tf, state_c, "initial_c")], autograph=False)
        def serve_state(inputs, sequence_lengths, initial_h, initial_c):
            lengths = checked_lengths(tf, inputs, sequence_lengths)
            return _named(tf, spec, forward(inputs, lengths, initial_h, initial_c))
    else:
        @tf.function(input_signature=[x_spec, len_spec, _named_spec(tf, state_h, "initial_h")], autograph=False)
        def serve_state(inputs, sequence_lengths, initial_h):
            return _named(tf, spec, forward(inputs, checked_lengths(tf, inputs, sequence_lengths), initial_h))
    with_state = serve_state.get_concrete_function()

    @tf.function(input_signature=[x_spec, len_spec], autograph=False)
    def serve(inputs, sequence_lengths):  # zero states: a call of the traced with_state, not a second trace
        batch = tf.shape(inputs)[0]
        states = [tf.zeros([spec.num_pseudo_layers, batch, width]) for width in
                  ([spec.state_size, spec.num_units] if spec.mode == "lstm" else [spec.state_size])]
        return {k: tf.identity(v, name=k) for k, v in with_state(inputs, sequence_lengths, *states).items()}

    module.serve, module.serve_state = serve.get_concrete_function(), with_state
    return module


def _named_spec(tf, spec, name):
    return tf.TensorSpec(spec.shape, spec.dtype, name=name)


def write_saved_model(canon: "CanonicalRNN", path: str, xla: bool = False) -> None:
    tf = import_tf()
    module = build_module(canon, xla)
    tf.saved_model.save(module, os.fspath(path), signatures={
        "serving_default": module.serve, "with_initial_state": module.serve_state})


def write_frozen_graph(canon: "CanonicalRNN", path: str) -> Dict[str, List[str]]:
    """Write a frozen GraphDef; return {"inputs": [tensor names], "outputs": [tensor names]}."""
    tf = import_tf()
    spec = canon.spec
    graph = tf.Graph()
    with graph.as_default():
        v1 = tf.compat.v1
        inputs = v1.placeholder(tf.float32, [None, None, spec.input_size], name="inputs")
        lengths = v1.placeholder(tf.int32, [None], name="sequence_lengths")
        batch = tf.shape(inputs)[0]
        initial_h = v1.placeholder_with_default(tf.zeros([spec.num_pseudo_layers, batch, spec.state_size]),
                                                [spec.num_pseudo_layers, None, spec.state_size], name="initial_h")
        initial_c = v1.placeholder_with_default(
            tf.zeros([spec.num_pseudo_layers, batch, spec.num_units]), [spec.num_pseudo_layers, None, spec.num_units],
            name="initial_c") if spec.mode == "lstm" else None
        _named(tf, spec, stack_forward(canon, inputs, checked_lengths(tf, inputs, lengths), initial_h, initial_c))
    graph_def = graph.as_graph_def()
    with open(path, "wb") as f:
        f.write(graph_def.SerializeToString())
    names_in, names_out = io_names(spec)
    return {"inputs": [f"{n}:0" for n in names_in], "outputs": [f"{n}:0" for n in names_out]}


def op_types(saved_model_or_graph_def: "graph_pb2.GraphDef") -> Set[str]:
    """Every op type in a GraphDef, its function library included (to prove no Cudnn* op is inside)."""
    graph_def = saved_model_or_graph_def
    types = {node.op for node in graph_def.node}
    for function in graph_def.library.function:
        types |= {node.op for node in function.node_def}
    return types


def strip_unused_placeholders(graph_def: "graph_pb2.GraphDef", keep: Sequence[str],
                              outputs: Mapping[str, str]) -> "tf.compat.v1.GraphDef":
    """A frozen GraphDef without placeholders nothing reads (``convert_variables_to_constants_v2`` leaves one
    ``unused_control_flow_input_N`` per loop input), and with an Identity node named after each key of ``outputs``
    ({name: tensor name}), so the outputs have stable names."""
    # lazy: TensorFlow, loaded on first use (import cudnn_port stays light)
    from tensorflow.core.framework import graph_pb2

    read = {inp.split(":")[0].lstrip("^") for node in graph_def.node for inp in node.input}
    read |= {t.split(":")[0] for t in outputs.values()}
    kept = {t.split(":")[0] for t in keep}
    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    for node in graph_def.node:
        if node.op == "Placeholder" and node.name not in read and node.name not in kept:
            continue
        out.node.add().CopyFrom(node)
    existing = {node.name for node in out.node}
    for name, tensor in outputs.items():
        if name == tensor.split(":")[0]:
            continue
        if name in existing:
            raise ValueError(f"the frozen graph already has a node named {name}; cannot name an output so")
        node = out.node.add(name=name, op="Identity", input=[tensor])
        node.attr["T"].type = 1  # DT_FLOAT; fixed below from the producer when it says otherwise
        producer = next((n for n in graph_def.node if n.name == tensor.split(":")[0]), None)
        if producer is not None and "T" in producer.attr:
            node.attr["T"].CopyFrom(producer.attr["T"])
    return out
