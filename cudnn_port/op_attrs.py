"""A TensorFlow NodeDef's attributes with its op's defaults filled in, read from TensorFlow's op registry: what both
the graph road (:mod:`cudnn_port.graphs.nodes`) and verify's judge of a SavedModel's cuDNN nodes
(:mod:`cudnn_port.judging.cudnn_nodes`) read a node by."""
from typing import Any, Dict


def node_attrs(node: Any) -> Dict[str, Any]:
    """A NodeDef's attributes with its op's defaults filled in (TensorFlow's op registry), as plain Python values."""
    # lazy: TensorFlow, loaded on first use (import cudnn_port stays light)
    from tensorflow.python.framework import op_def_registry

    values = {}
    for attr in op_def_registry.get(node.op).attr:
        value = node.attr[attr.name] if attr.name in node.attr else attr.default_value
        kind = value.WhichOneof("value")
        values[attr.name] = value.s.decode() if kind == "s" else getattr(value, kind) if kind else None
    return values
