"""model.onnx of a signature whose preprocessing standard ONNX cannot hold: the numeric part.

A raw-text model exported the way the Keras text-classification tutorial does it (``Sequential([TextVectorization,
model, Activation])``) takes strings: its signature lowercases them and strips punctuation (``StringLower``,
``StaticRegexReplace``), splits them (``StringSplitV2``), looks the words up in a table (``HashTableV2``,
``LookupTableFindV2``) and pads the ids into a dense tensor, and only then reaches the model. tf2onnx maps the lookup
to ``ai.onnx.ml`` ``LabelEncoder`` when it is handed the table's contents, but the regex and the split have no
standard ONNX op. Then model.onnx holds what follows the preprocessing: its input is the first tensor that the
preprocessing produces and that alone leads from the strings to every output (the padded token ids), fed under
the name ``token_ids``; OUT/saved_model keeps the whole signature, strings in.
"""
import contextlib
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Tuple

from ..deps import import_tf
from ..errors import CudnnPortError, NotWritten, reason
from ..exports import onnx_tf
from .frozen import INIT, frozen_signature, graph_runner
from .nodes import load_proto

if TYPE_CHECKING:
    from tensorflow.core.framework import graph_pb2
    import tensorflow as tf

CUT_NAME = "token_ids"
TEXT_OPS = ("StaticRegexReplace", "RegexReplace", "StringSplit", "StringSplitV2", "StringLower", "StringUpper",
            "StringNGrams", "StringToHashBucketFast", "StringToHashBucket", "StringToHashBucketStrong",
            "UnicodeDecode", "UnicodeDecodeWithOffsets", "UnicodeTranscode", "Substr", "StringStrip",
            "StringJoin", "StringLength", "StringToNumber", "RegexFullMatch", "StaticRegexFullMatch")


def _is_text(op) -> bool:
    """Whether ``op`` (a tf.Operation) handles strings or lookup tables."""
    tf = import_tf()
    return op.type in TEXT_OPS or "LookupTable" in op.type or "HashTable" in op.type or \
        any(t.dtype in (tf.string, tf.resource) for t in list(op.inputs) + list(op.outputs))


def numeric_cut(graph: "tf.Graph", outputs: List[str]) -> Optional[Any]:
    """The first tensor of ``graph`` (a tf.Graph, topologically ordered as a frozen graph is) that text ops produce,
    is numeric, and alone connects the text part to every tensor of ``outputs``: the part of the graph the
    outputs need, that tensor taken as an input, holds no text op. None if there is none."""
    text = {op for op in graph.get_operations() if _is_text(op)}
    tainted = set(text)
    for op in graph.get_operations():
        if any(t.op in tainted for t in op.inputs):
            tainted.add(op)
    ends = [graph.get_tensor_by_name(name).op for name in outputs]
    for op in graph.get_operations():
        if op in text or op not in tainted:
            continue
        for tensor in op.outputs:
            if tensor.dtype.is_integer or tensor.dtype.is_floating:
                if _clean_above(ends, tensor, text):
                    return tensor
    return None


def _clean_above(ends, cut, text) -> bool:
    """Whether the ops ``ends`` need, ``cut`` taken as given, include no op of ``text``."""
    seen, todo = set(), list(ends)
    while todo:
        op = todo.pop()
        if op in seen:
            continue
        if op in text:
            return False
        seen.add(op)
        todo += [t.op for t in op.inputs if t is not cut]
    return True


def with_input(graph_def: "graph_pb2.GraphDef", cut_name: str, dtype: "tf.DType",
               shape: "tf.TensorShape") -> "graph_pb2.GraphDef":
    """A copy of ``graph_def`` where every use of tensor ``cut_name`` reads a new Placeholder :data:`CUT_NAME`."""
    out = type(graph_def)()
    out.CopyFrom(graph_def)
    base, index = cut_name.split(":")
    refs = {cut_name} | ({base} if index == "0" else set())
    for node in out.node:
        for i, ref in enumerate(node.input):
            if ref in refs:
                node.input[i] = CUT_NAME
    placeholder = out.node.add(name=CUT_NAME, op="Placeholder")
    placeholder.attr["dtype"].type = dtype.as_datatype_enum
    placeholder.attr["shape"].shape.CopyFrom(shape.as_proto())
    return out


def text_ops(graph: "tf.Graph") -> List[str]:
    """The types of the text ops of ``graph`` that tf2onnx writes no standard ONNX op for (it writes StringLower
    and StringUpper as StringNormalizer), in order of first appearance."""
    return list(dict.fromkeys(op.type for op in graph.get_operations()
                              if op.type in TEXT_OPS and op.type not in ("StringLower", "StringUpper")))


def write_signature_onnx(saved_model: str, path: str, signature: str) -> Dict[str, Any]:
    """ONNX of ``signature`` of ``saved_model`` at ``path``: the whole signature where ONNX can hold it (lookup
    tables as LabelEncoder), else its numeric part (:func:`numeric_cut`). Returns {} for the whole signature, or
    what the manifest says of the numeric part: ``onnx_input`` (name, dtype, shape, the tensor it replaces, the
    string inputs it comes from) and ``onnx_part`` (why)."""
    # lazy: tf2onnx, loaded on first use (import cudnn_port stays light)
    from tf2onnx import tf_loader

    tf = import_tf()
    declared = load_proto(saved_model).meta_graphs[0].signature_def[signature].inputs
    if all(spec.dtype != tf.string.as_datatype_enum for spec in declared.values()):
        onnx_tf.write_saved_model_onnx(saved_model, path, signature)
        return {}
    onnx_tf.quiet_converters()
    frozen, inputs, outputs, renames = tf_loader.from_saved_model(
        saved_model, None, None, signatures=[signature], return_tensors_to_rename=True)
    with tf.Graph().as_default() as graph:
        tf.compat.v1.import_graph_def(frozen, name="")
    strings = [name for name in inputs if graph.get_tensor_by_name(name).dtype == tf.string]
    found = text_ops(graph)
    if not found:
        onnx_tf.write_graph_onnx(frozen, inputs, outputs, path, renames)
        return {}
    cut = numeric_cut(graph, outputs)
    where = f"signature {signature}'s preprocessing ({', '.join(found)})"
    if cut is None:
        raise CudnnPortError(f"model.onnx not written: standard ONNX has no {found[0]} op, and no single numeric "
                             f"tensor separates {where} from the model")
    part = with_input(frozen, cut.name, cut.dtype, cut.shape)
    onnx_tf.write_graph_onnx(part, [f"{CUT_NAME}:0"], outputs, path, dict(renames, **{f"{CUT_NAME}:0": CUT_NAME}))
    shape = [d if d is not None else -1 for d in (cut.shape.as_list() if cut.shape.rank is not None else [])]
    fed = [renames.get(n, n.split(":")[0]) for n in strings]
    return {"onnx_input": {"name": CUT_NAME, "dtype": cut.dtype.name, "shape": shape, "replaces": cut.name,
                           "computed_from": fed},
            "onnx_part": f"model.onnx holds the numeric part of {signature}: standard ONNX has no {found[0]} op "
                         f"(tf2onnx: {', '.join(found)}), so it takes {CUT_NAME} ({cut.dtype.name} {shape}), the "
                         f"token ids the preprocessing computes from {', '.join(fed)}; saved_model/ (and "
                         "frozen_graph.pb) take the strings"}


def cut_values(saved_model: str, signature: str, feeds: Dict[str, Any], cut_name: str) -> Tuple[Any, Dict[str, Any]]:
    """(the value of tensor ``cut_name``, {output name: value}) of ``signature`` of ``saved_model`` on ``feeds``
    (signature input names), run on CPU in the graph tf2onnx freezes, its tables filled from the SavedModel."""
    return cut_runner(saved_model, signature, cut_name)(feeds)


def cut_runner(saved_model: str, signature: str,
               cut_name: str) -> Callable[[Dict[str, Any]], Tuple[Any, Dict[str, Any]]]:
    """:func:`cut_values` as ``run(feeds)``: the signature frozen and its tables filled once, for many runs."""
    graph_def, inputs, outputs = frozen_signature(saved_model, signature)
    run = graph_runner(graph_def, {"inputs": inputs, "outputs": outputs, "init": INIT}, [cut_name])

    def values(feeds):
        found = run(feeds)
        return found.pop(cut_name), found

    return values


@contextlib.contextmanager
def foreign_part(kept: bool) -> Iterator[None]:
    """Where writing model.onnx fails in a part of the graph that is not a cuDNN node (an op tf2onnx or ONNX has
    no counterpart for): :class:`~cudnn_port.errors.NotWritten` naming it (one warning) when ``kept`` (the SavedModel
    is written: exit 0), else one line (exit 2). The ONNX file is not left behind."""
    try:
        yield
    except Exception as e:  # CudnnPortError from user_graph, onnx's ValidationError, tf2onnx's errors
        if not (isinstance(e, CudnnPortError) or type(e).__module__.startswith(("onnx", "tf2onnx"))):
            raise
        line = str(e) if isinstance(e, CudnnPortError) else reason(e, 160)
        if not kept:
            raise CudnnPortError(f"model.onnx not written ({line}); nothing else was asked for") from None
        raise NotWritten(f"{line}; saved_model/ holds the whole signature") from None
