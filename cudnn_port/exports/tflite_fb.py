"""A small writer of TFLite flatbuffers (builtin ops only), on the schema's own Python bindings (object API).

    model = FlatModel()
    g = model.subgraph("main")
    x = g.tensor("inputs", "float32", [-1, -1, 5])            # -1: a dynamic dimension (shape_signature)
    y = g.op("TANH", [x], "y")
    g.inputs, g.outputs = [x], [y]
    data = model.serialize()

The schema bindings come from ``ai_edge_litert`` (LiteRT) or, without it, from TensorFlow's copy
(``tensorflow.lite.python.schema_py_generated``); both are generated from the same ``schema.fbs``.
"""
from types import ModuleType
from typing import List, Optional, Sequence, Union

import numpy as np

from ..deps import import_tf

TYPES = {"float32": "FLOAT32", "int32": "INT32", "int64": "INT64", "bool": "BOOL"}
VERSION = 3  # the schema version every current TFLite runtime reads


def schema() -> ModuleType:
    """The flatbuffer schema bindings: LiteRT's, else TensorFlow's."""
    try:  # lazy: LiteRT or TensorFlow, optional dependencies loaded on first use
        from ai_edge_litert import schema_py_generated
    except ImportError:
        import_tf()
        from tensorflow.lite.python import schema_py_generated
    return schema_py_generated


class Subgraph:
    """One subgraph: tensors, operators in execution order, inputs and outputs (tensor indices)."""

    def __init__(self, model, name):
        self.model, self.name = model, name
        self.tensors, self.operators, self.inputs, self.outputs = [], [], [], []

    def tensor(self, name: str, dtype: str = "float32", shape: Sequence[int] = (), data: Optional[np.ndarray] = None,
               variable: bool = False) -> int:
        """A new tensor's index. ``shape``: -1 marks a dynamic dimension; ``data``: a constant's value."""
        fb = self.model.fb
        t = fb.TensorT()
        t.name, t.type = name, getattr(fb.TensorType, TYPES[dtype])
        shape = [int(d) for d in shape]
        t.shape = [1 if d < 0 else d for d in shape]
        if any(d < 0 for d in shape):
            t.shapeSignature = shape
        t.isVariable = variable
        t.buffer = 0 if data is None else self.model.buffer(np.ascontiguousarray(data, dtype=dtype).tobytes())
        self.tensors.append(t)
        return len(self.tensors) - 1

    def const(self, name: str, value: np.ndarray, dtype: Optional[str] = None) -> int:
        value = np.asarray(value, dtype=dtype)
        return self.tensor(name, str(value.dtype), value.shape, data=value)

    def op(self, code: str, inputs: Sequence[int], outputs: Union[int, str, Sequence[Union[int, str]]],
           options: Optional[str] = None, dtype: str = "float32", **fields) -> Union[int, List[int]]:
        """Append builtin op ``code`` (a BuiltinOperator name); ``outputs``: tensor indices, or names (one or a list)
        of new tensors of ``dtype``. ``options``: the name of its options table, set from ``fields``. Returns the
        output index (one output) or the list."""
        fb = self.model.fb
        if isinstance(outputs, (str, int)):
            outputs = [outputs]
        outs = [o if isinstance(o, int) else self.tensor(o, dtype) for o in outputs]
        o = fb.OperatorT()
        o.opcodeIndex, o.inputs, o.outputs = self.model.opcode(code), list(inputs), outs
        if options:
            o.builtinOptionsType = getattr(fb.BuiltinOptions, options)
            o.builtinOptions = getattr(fb, options + "T")()
            for key, value in fields.items():
                setattr(o.builtinOptions, key, value)
        self.operators.append(o)
        return outs[0] if len(outs) == 1 else outs


class FlatModel:
    """A TFLite model under construction: subgraphs (the first is the main one), buffers and op codes."""

    def __init__(self, description="cudnn-port"):
        self.fb = schema()
        self.description = description
        self.subgraphs, self.codes, self.signatures = [], [], []
        self.buffers = [self.fb.BufferT()]  # buffer 0: the empty buffer of every non-constant tensor

    def subgraph(self, name: str) -> Subgraph:
        g = Subgraph(self, name)
        self.subgraphs.append(g)
        return g

    def signature(self, key: str, subgraph: int = 0) -> None:
        """A SignatureDef ``key`` naming subgraph ``subgraph``'s inputs and outputs by their tensor names, for
        ``interpreter.get_signature_runner(key)``."""
        fb, g = self.fb, self.subgraphs[subgraph]

        def tensor_map(indices):
            found = []
            for index in indices:
                m = fb.TensorMapT()
                m.name, m.tensorIndex = g.tensors[index].name, index
                found.append(m)
            return found

        s = fb.SignatureDefT()
        s.signatureKey, s.subgraphIndex = key, subgraph
        s.inputs, s.outputs = tensor_map(g.inputs), tensor_map(g.outputs)
        self.signatures.append(s)

    def buffer(self, data: bytes) -> int:
        b = self.fb.BufferT()
        b.data = np.frombuffer(data, np.uint8)
        self.buffers.append(b)
        return len(self.buffers) - 1

    def opcode(self, code: str) -> int:
        if code not in self.codes:
            self.codes.append(code)
        return self.codes.index(code)

    def serialize(self) -> bytes:
        # lazy: flatbuffers, loaded on first use (import cudnn_port stays light)
        import flatbuffers

        fb = self.fb
        model = fb.ModelT()
        model.version, model.description, model.buffers = VERSION, self.description, self.buffers
        model.signatureDefs, model.operatorCodes = self.signatures, []
        for code in self.codes:
            c = fb.OperatorCodeT()
            value = getattr(fb.BuiltinOperator, code)
            c.builtinCode, c.deprecatedBuiltinCode, c.version = value, min(value, 127), 1
            model.operatorCodes.append(c)
        model.subgraphs = []
        for g in self.subgraphs:
            s = fb.SubGraphT()
            s.name, s.tensors, s.operators, s.inputs, s.outputs = g.name, g.tensors, g.operators, g.inputs, g.outputs
            model.subgraphs.append(s)
        builder = flatbuffers.Builder(1024)
        builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
        return bytes(builder.Output())

