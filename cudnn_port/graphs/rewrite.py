"""cuDNN nodes of a SavedModel replaced by standard TensorFlow ops, so the graph runs on any CPU.

Keras 3 traces its cuDNN path whenever a GPU is visible, so a model exported on a GPU host holds ``CudnnRNNV3``
nodes and fails on a CPU with "No OpKernel was registered to support Op 'CudnnRNNV3'" (tf2onnx: "not
supported"). Each such node is replaced by a call to a function of standard TensorFlow ops that computes the same
outputs from the same inputs, its ``params`` included, so weights computed in the graph from variables (Keras) or
stored as constants both keep working, and the variables, signatures and everything around the node stay as
they were::

    node  CudnnRNNV3(input, input_h, input_c, params, sequence_lengths)       (attrs: rnn_mode, direction, ...)
    ->    node  <cpu function>(same inputs)  with outputs named output, output_h, output_c, reserve_space,
          host_reserved, so every consumer's reference (``node:output_h:0``) still resolves

reserve_space and host_reserved come back empty: they only feed cuDNN's backward op.

A backward node (``CudnnRNNBackprop`` / V2 / V3, in a gradient that a signature computes) is replaced the same way,
by a function that runs the same CPU forward pass from the node's inputs under a GradientTape and returns the
gradients of ``sum(output * output_backprop) + sum(output_h * output_h_backprop) + sum(output_c *
output_c_backprop)`` with respect to input, input_h, input_c and params (outputs named like the op's;
reserve_space is not read).
"""
import hashlib
import os
import shutil
from typing import TYPE_CHECKING, List, Sequence

from ..deps import import_tf
from .nodes import FORWARD_OPS, is_cudnn
from .prune import redirect
from ..tf_graph import cudnn_op_cpu

if TYPE_CHECKING:
    from tensorflow.core.framework import function_pb2
    from ..graphs.nodes import CudnnNode
    from tensorflow.core.protobuf import saved_model_pb2

OUTPUTS = ("output", "output_h", "output_c", "reserve_space", "host_reserved")
BACKWARD_OUTPUTS = ("input_backprop", "input_h_backprop", "input_c_backprop", "params_backprop")
FUNCTION_PREFIX = "cudnn_port_cpu_rnn"


def _backward(tf, spec, time_major, dtype, forward_inputs):
    """The CPU function of a backward node: args are the forward op's inputs (4, or 5 with sequence_lengths), its
    three outputs, their three backprops, reserve_space[, host_reserved]."""
    def run(*args):
        inputs = list(args[:forward_inputs])
        backprops = args[forward_inputs + 3:forward_inputs + 6]
        with tf.GradientTape() as tape:
            for t in inputs[:4]:
                tape.watch(t)
            outputs = cudnn_op_cpu(spec, time_major, 3, *inputs)
            total = tf.add_n([tf.reduce_sum(tf.cast(o, tf.float32) * tf.cast(g, tf.float32))
                              for o, g in zip(outputs, backprops)])
        found = tape.gradient(total, inputs[:4])
        return [tf.zeros_like(t) if g is None else tf.cast(g, dtype) for t, g in zip(inputs[:4], found)]

    return run


def replacement_functions(node: "CudnnNode") -> List["function_pb2.FunctionDef"]:
    """FunctionDefs computing ``node`` on CPU: the replacement (first) and the loop functions it calls, all named
    uniquely for this node's configuration. The replacement's outputs are named like the op's (OUTPUTS, or
    BACKWARD_OUTPUTS for a backward node)."""
    tf = import_tf()
    spec, v3 = node.spec, node.op.endswith("V3")
    dtype = tf.as_dtype(node.dtype)
    signature = [tf.TensorSpec(None, dtype), tf.TensorSpec(None, dtype), tf.TensorSpec(None, dtype),
                 tf.TensorSpec([spec.param_count], dtype)] + ([tf.TensorSpec([None], tf.int32)] if v3 else [])
    if node.backward:
        forward_inputs = len(signature)
        signature += [tf.TensorSpec(None, dtype)] * 7 + ([tf.TensorSpec(None, tf.int8)] if node.op != "CudnnRNNBackprop"
                                                          else [])
        run = _backward(tf, spec, node.time_major, dtype, forward_inputs)
    else:
        def run(*args):
            return cudnn_op_cpu(spec, node.time_major, FORWARD_OPS[node.op], *args)

    concrete = tf.function(run, input_signature=signature, autograph=False).get_concrete_function()
    main = concrete.function_def
    called = list(concrete.graph.as_graph_def().library.function)
    suffix = hashlib.sha1(repr(node.config).encode()).hexdigest()[:10]
    names = {f.signature.name: f"{FUNCTION_PREFIX}_{i}_{suffix}" for i, f in enumerate(called)}
    names[main.signature.name] = f"{FUNCTION_PREFIX}_{spec.mode}_{suffix}"
    renamed = [_renamed(f, names) for f in [main] + called]
    head = renamed[0].signature
    old = [arg.name for arg in head.output_arg]
    rets = {name: renamed[0].ret[name] for name in old}
    renamed[0].ret.clear()
    for arg, new in zip(head.output_arg, BACKWARD_OUTPUTS if node.backward else OUTPUTS):
        renamed[0].ret[new] = rets[arg.name]
        arg.name = new
    return renamed


def _renamed(function_def, names):
    """A copy of ``function_def`` with itself and every function it refers to renamed by ``names``."""
    f = type(function_def)()
    f.CopyFrom(function_def)
    f.signature.name = names.get(f.signature.name, f.signature.name)
    for node in f.node_def:
        redirect(node, names)
    return f


def rewrite(proto: "saved_model_pb2.SavedModel", nodes: "Sequence[CudnnNode]") -> None:
    """Replace every node of ``nodes`` in ``proto`` (in place) by a call to its CPU function."""
    by_place = {(n.function, n.name): n for n in nodes}
    traced = {}  # config -> replacement functions: traced once however many nodes share it
    for meta in proto.meta_graphs:
        library = meta.graph_def.library
        known = {f.signature.name for f in library.function}
        places = [(f.signature.name, f.node_def) for f in library.function] + [(None, meta.graph_def.node)]
        for where, node_defs in places:
            for node_def in node_defs:
                node = by_place.get((where, node_def.name))
                if node is None or not is_cudnn(node_def.op):
                    continue
                if node.config not in traced:
                    traced[node.config] = replacement_functions(node)
                functions = traced[node.config]
                for f in functions:
                    if f.signature.name not in known:
                        library.function.add().CopyFrom(f)
                        known.add(f.signature.name)
                node_def.op = functions[0].signature.name
                for attr in [a for a in node_def.attr if not a.startswith("_") or a == "_output_shapes"]:
                    del node_def.attr[attr]  # the op's attributes, and shape hints the new outputs need not match


def write_cpu_saved_model(source: str, out: str, nodes: "Sequence[CudnnNode]",
                          proto: "saved_model_pb2.SavedModel") -> None:
    """Write ``source``'s SavedModel with ``nodes`` (found in ``proto``, its parsed saved_model.pb, which is
    rewritten in place) replaced to folder ``out`` (variables and assets copied)."""
    rewrite(proto, nodes)
    os.makedirs(out)
    for name in os.listdir(source):
        path = os.path.join(source, name)
        if name in ("saved_model.pb", "fingerprint.pb"):  # the fingerprint would no longer match the graph
            continue
        (shutil.copytree if os.path.isdir(path) else shutil.copy2)(path, os.path.join(out, name))
    with open(os.path.join(out, "saved_model.pb"), "wb") as f:
        f.write(proto.SerializeToString())
