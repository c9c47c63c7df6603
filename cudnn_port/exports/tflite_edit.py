"""Editing a parsed TFLite model (the schema's object API, ``ModelT``): new tensors and operators in its main
subgraph, op codes found or added, and what nothing uses dropped. For :mod:`cudnn_port.exports.tflite_model`."""
from types import ModuleType
from typing import Any, List, Optional

import numpy as np

from .tflite_fb import schema


def tensor(model: Any, name: str, value: Optional[np.ndarray] = None) -> int:
    """A new tensor of the main subgraph: an int32 / float32 constant ``value``, or (None) an int32 result."""
    fb, main = schema(), model.subgraphs[0]
    t = fb.TensorT()
    t.name, t.shape, t.buffer, t.type = name.encode(), [], 0, fb.TensorType.INT32
    if value is not None:
        b = fb.BufferT()
        b.data = np.frombuffer(value.tobytes(), np.uint8)
        model.buffers.append(b)
        t.shape, t.buffer = list(value.shape), len(model.buffers) - 1
        t.type = fb.TensorType.INT32 if value.dtype == np.int32 else fb.TensorType.FLOAT32
    main.tensors.append(t)
    return len(main.tensors) - 1


def op(fb: ModuleType, code: int, inputs: List[int], outputs: List[int], options: Optional[str] = "TransposeOptions",
       **fields) -> Any:
    o = fb.OperatorT()
    o.opcodeIndex, o.inputs, o.outputs = code, inputs, outputs
    if options:
        o.builtinOptionsType = getattr(fb.BuiltinOptions, options)
        o.builtinOptions = getattr(fb, options + "T")()
        for key, value in fields.items():
            setattr(o.builtinOptions, key, value)
    return o


def builtin(fb: ModuleType, name: str) -> Any:
    c = fb.OperatorCodeT()
    value = getattr(fb.BuiltinOperator, name)
    c.builtinCode, c.deprecatedBuiltinCode, c.version = value, min(value, 127), 1
    return c


def code(model: Any, code: Any) -> int:
    """The index of op code ``code`` in ``model``, appended if new."""
    key = (max(code.builtinCode, code.deprecatedBuiltinCode), code.customCode, code.version)
    for k, c in enumerate(model.operatorCodes):
        if (max(c.builtinCode, c.deprecatedBuiltinCode), c.customCode, c.version) == key:
            return k
    model.operatorCodes.append(code)
    return len(model.operatorCodes) - 1


def name(model: Any, op: Any) -> str:
    fb, code = schema(), model.operatorCodes[op.opcodeIndex]
    value = max(code.builtinCode, code.deprecatedBuiltinCode)
    return next(k for k, v in vars(fb.BuiltinOperator).items() if v == value and not k.startswith("_"))


def producer(model: Any, index: int) -> Any:
    return next((o for o in model.subgraphs[0].operators if index in list(o.outputs)), None)


def live(g: Any, operators: List[Any]) -> List[object]:
    """``operators`` without those whose outputs nothing reads (the converter's lengths and zero states that the
    spliced stacks no longer take: sized while the model runs, they would make LiteRT re-plan its memory)."""
    while True:
        read = set(g.outputs) | {i for o in operators for i in o.inputs}
        kept = [o for o in operators if read & set(o.outputs)]
        if len(kept) == len(operators):
            return kept
        operators = kept


def drop_unused_tensors(g: Any) -> None:
    """Tensors no operator, input or output of subgraph ``g`` names (the custom ops' params and reserve spaces)
    removed, every index renumbered."""
    used = set(g.inputs) | set(g.outputs) | {i for o in g.operators for i in list(o.inputs) + list(o.outputs)
                                             if i >= 0}
    used |= {i for o in g.operators for i in (list(o.intermediates) if o.intermediates is not None else [])}
    keep = sorted(used)
    renumber = {old: new for new, old in enumerate(keep)}
    renumber[-1] = -1
    g.tensors = [g.tensors[k] for k in keep]
    g.inputs, g.outputs = [renumber[i] for i in g.inputs], [renumber[i] for i in g.outputs]
    for o in g.operators:
        o.inputs, o.outputs = [renumber[i] for i in o.inputs], [renumber[i] for i in o.outputs]
        if o.intermediates is not None:
            o.intermediates = [renumber[i] for i in o.intermediates]


def drop_unused_codes(model: Any) -> None:
    """Op codes no operator uses (the custom op's) removed, the operators' indices renumbered."""
    used = sorted({o.opcodeIndex for g in model.subgraphs for o in g.operators or []})
    renumber = {old: new for new, old in enumerate(used)}
    model.operatorCodes = [model.operatorCodes[k] for k in used]
    for g in model.subgraphs:
        for o in g.operators or []:
            o.opcodeIndex = renumber[o.opcodeIndex]


def serialize(model: Any) -> bytes:
    # lazy: flatbuffers, loaded on first use (import cudnn_port stays light)
    import flatbuffers

    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())
