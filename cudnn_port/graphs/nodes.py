"""The cuDNN nodes of a SavedModel: where each is, and what stack it computes.

The node's attributes give the mode, the directions and the projection; the static shapes of its inputs (shape
inference over the function that holds it) give input size, hidden size and layers, checked against the params
size (docs/conventions.md, section 1).
"""
import os
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Set, Tuple

from ..deps import import_tf
from ..errors import CudnnPortError
from ..op_attrs import node_attrs
from ..infer import candidates
from ..layout import MODES, RNNSpec
from ..paths import require_file
from ..exports.onnx import cannot_hold
from .callshapes import CallShapes

if TYPE_CHECKING:
    from tensorflow.core.protobuf import saved_model_pb2

FORWARD_OPS = {"CudnnRNN": 4, "CudnnRNNV2": 5, "CudnnRNNV3": 5}  # op -> number of outputs
BACKWARD_OPS = ("CudnnRNNBackprop", "CudnnRNNBackpropV2", "CudnnRNNBackpropV3")


def is_cudnn(op: str) -> bool:
    """Whether ``op`` is a cuDNN RNN op, forward or backward."""
    return op in FORWARD_OPS or op in BACKWARD_OPS


def load_proto(path: str) -> "saved_model_pb2.SavedModel":
    """The parsed saved_model.pb of folder ``path``; one line if it is empty, damaged or not a SavedModel."""
    import_tf()  # TensorFlow's environment set before its first import
    # lazy: TensorFlow, loaded on first use (import cudnn_port stays light)
    from tensorflow.core.framework import graph_pb2
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    pb = require_file(os.path.join(path, "saved_model.pb"), "saved_model.pb")
    try:
        with open(pb, "rb") as f:
            data = f.read()
        proto.ParseFromString(data)
    except Exception as e:  # DecodeError and friends
        raise CudnnPortError(f"cannot read {pb} ({type(e).__name__}); is it a complete SavedModel folder?") from None
    if not any(m.graph_def.node or m.graph_def.library.function for m in proto.meta_graphs):
        graph = graph_pb2.GraphDef()
        try:  # protobuf reads any bytes as any message: a GraphDef reads as a SavedModel with an empty graph
            graph.ParseFromString(data)
        except Exception:
            graph = None
        if graph is not None and graph.node and all(n.op for n in graph.node):
            raise CudnnPortError(f"{pb} is a GraphDef (a frozen graph), not a SavedModel; pass a folder that "
                                 "tf.saved_model.save (or model.export) wrote")
        raise CudnnPortError(f"{pb} holds no graph (it is empty or damaged); is it a complete SavedModel folder?")
    return proto


class CudnnNode:
    """One cuDNN node, forward or backward (its first four inputs are the forward op's): where it is, what it
    computes."""

    def __init__(self, function, node, shapes):
        self.function, self.name, self.op = function, node.name, node.op
        self.backward = node.op in BACKWARD_OPS
        attrs = node_attrs(node)
        where = f"node {node.name} ({node.op}) in {function or 'the main graph'}"
        if attrs["rnn_mode"] not in MODES:
            raise CudnnPortError(f"{where} has rnn_mode={attrs['rnn_mode']}, none of cuDNN's {', '.join(MODES)}")
        self.time_major = bool(attrs.get("time_major", True))
        self.dtype = import_tf().as_dtype(attrs["T"]).name
        bidirectional = attrs["direction"] == "bidirectional"
        x, h, c, params = (shapes[i] if shapes else None for i in range(4))
        proj = int(attrs.get("num_proj") or 0)
        input_size = _dim(x, -1)
        units = _dim(c, -1) if proj else _dim(h, -1)  # with a projection h is P wide, c H wide
        size = _dim(params, 0)
        states = _dim(h, 0 if self.time_major else 1)
        layers = states // (1 + bidirectional) if states else None
        if attrs["input_mode"] == "skip_input" or (attrs["input_mode"] == "auto_select" and input_size == units):
            raise CudnnPortError(f"{where} has input_mode={attrs['input_mode']} (no input weights); only "
                                 "linear_input converts")
        if None not in (input_size, units, layers):
            spec = RNNSpec(attrs["rnn_mode"], layers, units, input_size, bidirectional, self.dtype, num_proj=proj)
            if size is not None and size != spec.param_count:
                raise CudnnPortError(f"{where}: its params hold {size} values, but a {spec.describe()} needs "
                                     f"{spec.param_count}; the graph is inconsistent")
        else:
            found = candidates(size, mode=attrs["rnn_mode"], bidirectional=bidirectional, num_layers=layers,
                               num_units=units, input_size=input_size, num_proj=proj, dtype=self.dtype) if size else []
            if len(found) != 1:
                known = f"its params' size {size} fits {len(found)} specs" if size else "so is its params' size"
                raise CudnnPortError(f"{where}: its input shapes are unknown and {known}; cannot tell its sizes")
            spec = found[0]
        self.spec = spec

    @property
    def config(self) -> Tuple[Any, ...]:
        """What the replacement depends on: nodes with equal configs share one replacement function."""
        return self.op, self.time_major, self.dtype, tuple(sorted(self.spec.to_dict().items()))

    def to_dict(self) -> Dict[str, Any]:
        return {"function": self.function, "node": self.name, "op": self.op, "time_major": self.time_major,
                "spec": self.spec.to_dict()}

    def converts_as(self) -> str:
        if self.backward:
            return f"{self.spec.describe()}: its gradient in CPU ops in the SavedModel; no ONNX (no backward op)"

        why = cannot_hold(self.spec)
        onnx = f"no ONNX ({why})" if why else f"fused ONNX {self.spec.mode.upper()} nodes in ONNX"
        return f"{self.spec.describe()}: CPU ops in the SavedModel, {onnx}"


def _dim(shape, axis):
    if shape is None or shape.rank is None or shape.rank == 0:
        return None
    value = shape[axis]
    return int(value) if value is not None else None


def _function_input_shapes(function_def):
    """{node name: [input shapes]} of the cuDNN nodes of one function, by shape inference over it."""
    # lazy: TensorFlow, loaded on first use (import cudnn_port stays light)
    from tensorflow.python.framework.function_def_to_graph import function_def_to_graph

    try:
        graph = function_def_to_graph(function_def)
    except Exception:  # shapes are a convenience: the params size alone settles most specs
        return {}
    return {op.name: [t.shape for t in op.inputs] for op in graph.get_operations() if is_cudnn(op.type)}


def _graph_input_shapes(graph_def):
    """The same for nodes of a (TF1) main graph."""
    tf = import_tf()
    try:
        with tf.Graph().as_default() as graph:
            tf.compat.v1.import_graph_def(graph_def, name="")
    except Exception:
        return {}
    return {op.name: [t.shape for t in op.inputs] for op in graph.get_operations() if is_cudnn(op.type)}


def _sized(shapes) -> bool:
    """Whether shapes of a cuDNN node's inputs give its input size and state width."""
    return bool(shapes) and _dim(shapes[0], -1) is not None and _dim(shapes[1], -1) is not None


def _called_shapes(calls, name):
    try:
        return calls.input_shapes(name, set(FORWARD_OPS) | set(BACKWARD_OPS))
    except Exception:  # noqa: BLE001 (shapes are a help: without them the params size alone must settle it)
        return {}


def find_nodes(proto: "saved_model_pb2.SavedModel", needed: Optional[Set[str]] = None) -> List[CudnnNode]:
    """Every cuDNN node (forward and backward) of the SavedModel, with its spec. Prune the proto first
    (:func:`cudnn_port.graphs.prune.prune`): this finds nodes in every function of the library, called or not.
    ``needed``: a set of function names; a node whose sizes cannot be told is then left out unless its function
    is in it (a layer's own call function in the object graph, which no signature calls)."""
    nodes = []
    for meta in proto.meta_graphs:
        library, calls = meta.graph_def.library, None
        for function in library.function:
            found = [n for n in function.node_def if is_cudnn(n.op)]
            if not found:
                continue
            shapes = _function_input_shapes(function)
            if not all(_sized(shapes.get(n.name)) for n in found):  # tf.keras 2.0-2.2 recorded no shapes: callers'
                calls = calls or CallShapes(meta)
                shapes = _called_shapes(calls, function.signature.name) or shapes
            for node in found:
                try:
                    nodes.append(CudnnNode(function.signature.name, node, shapes.get(node.name)))
                except CudnnPortError:
                    if needed is None or function.signature.name in needed:
                        raise
        main = [n for n in meta.graph_def.node if is_cudnn(n.op)]
        shapes = _graph_input_shapes(meta.graph_def) if main else {}
        nodes += [CudnnNode(None, node, shapes.get(node.name)) for node in main]
    return nodes


def signature_names(proto: "saved_model_pb2.SavedModel") -> List[str]:
    """The SavedModel's signatures, sorted (not TensorFlow's own ``__saved_model_init_op``)."""
    names = proto.meta_graphs[0].signature_def if proto.meta_graphs else {}
    return sorted(name for name in names if not name.startswith("__"))


def onnx_signature(proto: "saved_model_pb2.SavedModel") -> Optional[str]:
    """The signature model.onnx holds: ``serving_default``, or the only signature there is (None otherwise)."""
    names = signature_names(proto)
    return "serving_default" if "serving_default" in names else (names[0] if len(names) == 1 else None)
