"""An artifact of OUT checked before a runtime parses it: OUT may be a half-copied download or someone else's.

LiteRT trusts a ``.tflite`` flatbuffer's offsets and indices: a truncated ``model.tflite`` crashed ``verify --json``
with SIGSEGV about one run in five. Here the whole flatbuffer is read in Python first (every table, vector and
string, so an offset beyond the file raises instead of reading memory), then every index the interpreter follows
is checked against what it indexes: tensors' buffers, operators' op codes and tensors, subgraphs' inputs and
outputs, the subgraphs control-flow ops call, signatures; constant buffers against their tensors' shapes. An
``.onnx`` file is parsed and passed through ``onnx.checker`` (onnxruntime checks less), but for a type without a
shape, which onnxruntime infers itself. A ``.keras`` file gets the
archive checks of :mod:`cudnn_port.readers.zip_guard`. A failure is one :class:`~cudnn_port.errors.CudnnPortError`
line naming the file: verify and bench fail that artifact's rows with it.
"""
import math
import os

from ..errors import CudnnPortError, reason
from ..readers.zip_guard import check_keras_zip
from .tflite_fb import schema

CONTROL_FLOW = {"WhileOptions": ("condSubgraphIndex", "bodySubgraphIndex"),
                "IfOptions": ("thenSubgraphIndex", "elseSubgraphIndex"),
                "CallOnceOptions": ("initSubgraphIndex",)}
ITEMSIZE = {"FLOAT32": 4, "FLOAT16": 2, "INT32": 4, "UINT8": 1, "INT64": 8, "BOOL": 1, "INT16": 2, "INT8": 1,
            "FLOAT64": 8, "UINT64": 8, "UINT32": 4, "UINT16": 2}


def check_artifact(path: str) -> None:
    """Refuse the artifact at ``path`` if a runtime could not parse it safely (by its extension; others pass)."""
    path = os.fspath(path)
    if path.endswith(".tflite"):
        check_tflite(path)
    elif path.endswith(".onnx"):
        check_onnx(path)
    elif path.endswith(".keras"):
        check_keras_zip(path)


def _damaged(path, why):
    return CudnnPortError(f"{path} is damaged ({why}); it was not run: convert again, or copy OUT again whole")


# onnx.checker's complaint about a type that names no shape: tf2onnx writes such value types for some graphs
# (a Loop's or an Expand's outputs), onnxruntime loads them and infers the shapes itself, so it is no sign of damage.
NO_SHAPE = "Field 'shape' of 'type' is required but missing"


def check_onnx(path: str) -> None:
    """``path`` parses as an ONNX model and passes ``onnx.checker`` (but for :data:`NO_SHAPE`)."""
    # lazy: onnx, loaded on first use (import cudnn_port stays light)
    import onnx

    try:
        onnx.checker.check_model(onnx.load(path, load_external_data=False))
    except Exception as e:  # DecodeError, ValidationError, OSError, ...
        if NO_SHAPE not in str(e):
            raise _damaged(path, reason(e)) from None


def check_tflite(path: str) -> None:
    """``path`` is a TFLite flatbuffer every offset and index of which stays inside what it points into."""
    fb = schema()
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8 or data[4:8] != b"TFL3":
        raise _damaged(path, "no TFLite header")
    try:
        model = fb.ModelT.InitFromObj(fb.Model.GetRootAs(data, 0))
        problem = _model_problem(fb, model, len(data))
    except RecursionError:
        problem = "its tables refer to each other in a loop"
    except Exception as e:  # struct.error, IndexError, ValueError, UnicodeDecodeError from an offset off the file
        problem = f"an offset outside the file ({reason(e, 60)})"
    if problem:
        raise _damaged(path, problem)


def _model_problem(fb, model, size):
    names = {v: k for k, v in vars(fb.TensorType).items() if not k.startswith("_")}
    top = max(v for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_"))
    buffers, codes, subgraphs = model.buffers or [], model.operatorCodes or [], model.subgraphs or []
    if model.version != 3 or not subgraphs:
        return f"schema version {model.version}, {len(subgraphs)} subgraphs"
    for code in codes:
        if not 0 <= max(code.builtinCode, code.deprecatedBuiltinCode) <= top or code.customCode:
            return "an unknown or custom op code"
    for b in buffers:
        if b.offset > 1 and b.offset + b.size > size:
            return "a buffer beyond the end of the file"
    for g, sub in enumerate(subgraphs):
        tensors = sub.tensors or []
        for t in tensors:
            shape = list(t.shape) if t.shape is not None else []
            if not 0 <= t.buffer < len(buffers) or t.type not in names or any(d < 0 for d in shape):
                return f"tensor {t.name!r} of subgraph {g}: buffer, type or shape out of range"
            data = buffers[t.buffer].data
            if data is not None and len(data) and names[t.type] in ITEMSIZE and \
                    len(data) != math.prod(shape) * ITEMSIZE[names[t.type]]:
                return f"tensor {t.name!r} of subgraph {g}: {len(data)} bytes for shape {shape}"
        for index in list(sub.inputs if sub.inputs is not None else []) + \
                list(sub.outputs if sub.outputs is not None else []):
            if not 0 <= index < len(tensors):
                return f"subgraph {g}'s inputs or outputs out of range"
        for op in sub.operators or []:
            used = [list(v) for v in (op.inputs, op.outputs, op.intermediates) if v is not None]
            if not 0 <= op.opcodeIndex < len(codes) or any(not -1 <= i < len(tensors) for v in used for i in v):
                return f"an operator of subgraph {g} refers to an op code or tensor out of range"
            for field in CONTROL_FLOW.get(type(op.builtinOptions).__name__[:-1], ()):
                if not 0 <= getattr(op.builtinOptions, field) < len(subgraphs):
                    return f"an operator of subgraph {g} calls a subgraph out of range"
    for sig in model.signatureDefs or []:
        if not 0 <= sig.subgraphIndex < len(subgraphs):
            return "a signature of a subgraph out of range"
        count = len(subgraphs[sig.subgraphIndex].tensors or [])
        if any(not 0 <= t.tensorIndex < count for t in (sig.inputs or []) + (sig.outputs or [])):
            return "a signature's tensor out of range"
    return None
