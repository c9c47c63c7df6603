"""SavedModels whose graphs hold cuDNN RNN nodes (``CudnnRNN``, ``CudnnRNNV2``, ``CudnnRNNV3``), made to run on CPU.

Keras 3 traces its cuDNN path whenever a GPU is visible, so a model exported on a GPU host holds ``CudnnRNNV3``
nodes and fails on a CPU with "No OpKernel was registered to support Op 'CudnnRNNV3'" (tf2onnx: "not
supported"). Each such node is replaced by a call to a function of standard TensorFlow ops that computes the same
outputs from the same inputs, its ``params`` included, so weights computed in the graph from variables (Keras) or
stored as constants both keep working, and the variables, signatures and everything around the node stay as
they were::

    node  CudnnRNNV3(input, input_h, input_c, params, sequence_lengths)       (attrs: rnn_mode, direction, ...)
    ->    node  <cpu function>(same inputs)  with outputs named output, output_h, output_c, reserve_space,
          host_reserved, so every consumer's reference (``node:output_h:0``) still resolves

The node's attributes give the mode and the directions; the static shapes of its inputs (shape inference over the
function that holds it) give input size, hidden size and layers, checked against the params size (conventions
§1). reserve_space and host_reserved come back empty: they only feed cuDNN's backward op.
"""
import hashlib
import os
import shutil

from .._tf import import_tf as _tf
from ..errors import CudnnPortError
from ..infer import candidates
from ..layout import RNNSpec

FORWARD_OPS = {"CudnnRNN": 4, "CudnnRNNV2": 5, "CudnnRNNV3": 5}  # op -> number of outputs
BACKWARD_OPS = ("CudnnRNNBackprop", "CudnnRNNBackpropV2", "CudnnRNNBackpropV3")
OUTPUTS = ("output", "output_h", "output_c", "reserve_space", "host_reserved")
FUNCTION_PREFIX = "cudnn_port_cpu_rnn"


def is_saved_model(path):
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, "saved_model.pb"))


def load_proto(path):
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    try:
        with open(os.path.join(path, "saved_model.pb"), "rb") as f:
            proto.ParseFromString(f.read())
    except Exception as e:  # DecodeError and friends
        raise CudnnPortError(f"cannot read {path}/saved_model.pb ({type(e).__name__}); is it a complete "
                             "SavedModel folder?") from None
    return proto


def _attrs(node):
    """The node's attributes with the op's defaults filled in, as plain Python values."""
    from tensorflow.python.framework import op_def_registry

    values = {}
    for attr in op_def_registry.get(node.op).attr:
        value = node.attr[attr.name] if attr.name in node.attr else attr.default_value
        kind = value.WhichOneof("value")
        values[attr.name] = value.s.decode() if kind == "s" else getattr(value, kind) if kind else None
    return values


class CudnnNode:
    """One cuDNN forward node: where it is, what it computes."""

    def __init__(self, function, node, shapes):
        self.function, self.name, self.op = function, node.name, node.op
        attrs = _attrs(node)
        where = f"node {node.name} ({node.op}) in {function or 'the main graph'}"
        if attrs["rnn_mode"] not in ("lstm", "gru"):
            raise CudnnPortError(f"{where} has rnn_mode={attrs['rnn_mode']}; only lstm and gru convert")
        if attrs.get("num_proj"):
            raise CudnnPortError(f"{where} has num_proj={attrs['num_proj']} (an LSTM projection); it does not "
                                 "convert yet")
        self.time_major = bool(attrs.get("time_major", True))
        self.dtype = _tf().as_dtype(attrs["T"]).name
        bidirectional = attrs["direction"] == "bidirectional"
        x, h, _, params = (shapes[i] if shapes else None for i in range(4))
        input_size = _dim(x, -1)
        units = _dim(h, -1)
        size = _dim(params, 0)
        states = _dim(h, 0 if self.time_major else 1)
        layers = states // (1 + bidirectional) if states else None
        if attrs["input_mode"] == "skip_input" or (attrs["input_mode"] == "auto_select" and input_size == units):
            raise CudnnPortError(f"{where} has input_mode={attrs['input_mode']} (no input weights); only "
                                 "linear_input converts")
        if None not in (input_size, units, layers):
            spec = RNNSpec(attrs["rnn_mode"], layers, units, input_size, bidirectional, self.dtype)
            if size is not None and size != spec.param_count:
                raise CudnnPortError(f"{where}: its params hold {size} values, but a {spec.describe()} needs "
                                     f"{spec.param_count}; the graph is inconsistent")
        else:
            found = candidates(size, mode=attrs["rnn_mode"], bidirectional=bidirectional, num_layers=layers,
                               num_units=units, input_size=input_size, dtype=self.dtype) if size else []
            if len(found) != 1:
                raise CudnnPortError(f"{where}: its input shapes are unknown and its params size "
                                     f"{size or 'is unknown'} fits {len(found)} specs; cannot tell its sizes")
            spec = found[0]
        self.spec = spec

    @property
    def config(self):
        """What the replacement depends on: nodes with equal configs share one replacement function."""
        return self.op, self.time_major, self.dtype, tuple(sorted(self.spec.to_dict().items()))

    def to_dict(self):
        return {"function": self.function, "node": self.name, "op": self.op, "time_major": self.time_major,
                "spec": self.spec.to_dict()}


def _dim(shape, axis):
    if shape is None or shape.rank is None or shape.rank == 0:
        return None
    value = shape[axis]
    return int(value) if value is not None else None


def _function_input_shapes(function_def):
    """{node name: [input shapes]} of the cuDNN nodes of one function, by shape inference over it."""
    from tensorflow.python.framework.function_def_to_graph import function_def_to_graph

    try:
        graph = function_def_to_graph(function_def)
    except Exception:  # shapes are a convenience: the params size alone settles most specs
        return {}
    return {op.name: [t.shape for t in op.inputs] for op in graph.get_operations() if op.type in FORWARD_OPS}


def _graph_input_shapes(graph_def):
    """The same for nodes of a (TF1) main graph."""
    tf = _tf()
    try:
        with tf.Graph().as_default() as graph:
            tf.compat.v1.import_graph_def(graph_def, name="")
    except Exception:
        return {}
    return {op.name: [t.shape for t in op.inputs] for op in graph.get_operations() if op.type in FORWARD_OPS}


def find_nodes(proto):
    """Every cuDNN forward node of the SavedModel, with its spec; refuses backward (training) nodes."""
    nodes = []
    for meta in proto.meta_graphs:
        library = meta.graph_def.library
        for function in library.function:
            found = [n for n in function.node_def if n.op in FORWARD_OPS or n.op in BACKWARD_OPS]
            if not found:
                continue
            shapes = _function_input_shapes(function)
            for node in found:
                if node.op in BACKWARD_OPS:
                    raise CudnnPortError(f"node {node.name} ({node.op}) in {function.signature.name} is cuDNN's "
                                         "training (backward) op; export the model for inference and convert that")
                nodes.append(CudnnNode(function.signature.name, node, shapes.get(node.name)))
        main = [n for n in meta.graph_def.node if n.op in FORWARD_OPS]
        shapes = _graph_input_shapes(meta.graph_def) if main else {}
        nodes += [CudnnNode(None, node, shapes.get(node.name)) for node in main]
    return nodes


def replacement_functions(node):
    """FunctionDefs computing ``node`` on CPU: the replacement (first) and the loop functions it calls, all named
    uniquely for this node's configuration. The replacement's outputs are named like the op's (OUTPUTS)."""
    from ..tf_graph import cudnn_op_cpu

    tf = _tf()
    spec, count, v3 = node.spec, FORWARD_OPS[node.op], node.op == "CudnnRNNV3"
    dtype = tf.as_dtype(node.dtype)
    signature = [tf.TensorSpec(None, dtype), tf.TensorSpec(None, dtype), tf.TensorSpec(None, dtype),
                 tf.TensorSpec([spec.param_count], dtype)] + ([tf.TensorSpec([None], tf.int32)] if v3 else [])

    def run(*args):
        return cudnn_op_cpu(spec, node.time_major, count, *args)

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
    for arg, new in zip(head.output_arg, OUTPUTS):
        renamed[0].ret[new] = rets[arg.name]
        arg.name = new
    return renamed


def _renamed(function_def, names):
    """A copy of ``function_def`` with itself and every function it refers to renamed by ``names``."""
    f = type(function_def)()
    f.CopyFrom(function_def)
    f.signature.name = names.get(f.signature.name, f.signature.name)
    for node in f.node_def:
        if node.op in names:
            node.op = names[node.op]
        for value in node.attr.values():
            if value.HasField("func") and value.func.name in names:
                value.func.name = names[value.func.name]
            for func in value.list.func:
                if func.name in names:
                    func.name = names[func.name]
    return f


def rewrite(proto, nodes):
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
                if node is None or node_def.op not in FORWARD_OPS:
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


def write_cpu_saved_model(source, out, nodes, proto):
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
