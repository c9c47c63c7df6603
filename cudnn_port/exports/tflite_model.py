"""The whole Keras model as ONE TFLite model, builtin ops only: ``OUT/model.tflite`` (embeddings, heads and every
fused layer), for :mod:`cudnn_port.model_export`.

Toolchain: TensorFlow's own TFLite converter for everything but the fused layers, and this project's model of each
fused stack (:mod:`cudnn_port.exports.tflite`) spliced in where the converter leaves the stack's cuDNN op::

    model traced with every fused layer as one CudnnRNNV3 op (batch-major), variables frozen into constants
    -> TFLiteConverter (builtin ops; custom ops allowed): every other op builtin, each CudnnRNNV3 one custom op
       inputs  x [B, T, I], h0 [B, L*D, S], c0 [B, L*D, H] (GRU: unused), params (the frozen buffer), lengths [B]
       outputs y [B, T, D*S], h_n [B, L*D, S], c_n [B, L*D, H], reserve_space, host_reserved (nothing may read these)
    -> each custom op replaced by the main subgraph of build_model(canon, stateful=True) of the layer whose buffer
       its params hold (LSTM: UNIDIRECTIONAL_SEQUENCE_LSTM ops; GRU: WHILE loops, whose subgraphs are appended):
         initial_h = TRANSPOSE(h0, [1, 0, 2])  (and initial_c)    y = its outputs
         h_n = TRANSPOSE(final_h, [1, 0, 2])   (and c_n, where read)
       then the params buffer emptied and op codes nothing uses dropped: no custom op, no Flex op remains.

Why not the converter alone: it has no builtin for cuDNN's op, and the CPU trace of a fused layer (a while loop of
matmuls) converts to a WHILE loop without the fused sequence-LSTM op. Why not our writer alone: the rest of a model
is any Keras graph, which TensorFlow's converter already lowers to builtins.

Interface: SignatureDef ``serving_default`` over the model's inputs (named as the model names them) returning
``output_0`` ... ``output_{n-1}``; batch and time dynamic. Each fused stack keeps the per-stack semantics of
:mod:`cudnn_port.exports.tflite` (zero outputs past each length, final states at each sequence's last step)::

    from ai_edge_litert.interpreter import Interpreter
    run = Interpreter("OUT/model.tflite").get_signature_runner("serving_default")
    logits = run(tokens=ids)["output_0"]
"""
from typing import Dict, List, Sequence

import numpy as np

from ..deps import import_tf
from ..errors import UnsupportedError
from .tflite import SIGNATURE, build_model as build_stack
from .tflite_fb import schema

CUSTOM = b"CudnnRNNV3"
BATCH_MAJOR = [1, 0, 2]  # [B, L*D, S] <-> [L*D, B, S]


def convert(frozen, input_names: Sequence[str], output_names: Sequence[str], canons: Dict[bytes, object]) -> bytes:
    """The serialized whole model. ``frozen``: the model's concrete function traced with its fused layers on the
    cuDNN path, variables frozen into constants; ``input_names``: the names of its inputs (as its placeholders are
    named), ``output_names``: the names of its outputs in ``frozen.outputs`` order; ``canons``: {a fused layer's
    buffer as float32 bytes: its CanonicalRNN}. Raises :class:`~cudnn_port.errors.UnsupportedError` (or the
    converter's error) when some op has no builtin TFLite op."""
    import warnings

    tf = import_tf()
    converter = tf.lite.TFLiteConverter.from_concrete_functions([frozen])
    converter.allow_custom_ops = True  # the CudnnRNNV3 ops, replaced below; any other custom op is refused
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data = converter.convert()
    fb = schema()
    model = fb.ModelT.InitFromPackedBuf(bytearray(data), 0)
    splice(model, canons)
    _signature(model, input_names, output_names)
    return serialize(model)


def splice(model, canons: Dict[bytes, object]) -> None:
    """Replace every CudnnRNNV3 custom op of ``model`` (a ModelT) by its stack's builtin ops, in place."""
    main, operators = model.subgraphs[0], []
    for g in model.subgraphs[1:]:
        if any(_custom(model, op) == CUSTOM for op in g.operators or []):
            raise UnsupportedError("a fused layer inside a loop or branch of the model cannot be spliced")
    for op in main.operators:
        if _custom(model, op) != CUSTOM:
            operators.append(op)
            continue
        params = main.tensors[op.inputs[3]]
        data = model.buffers[params.buffer].data
        canon = canons.get(bytes(np.asarray(data, np.uint8))) if data is not None else None
        if canon is None:
            raise UnsupportedError("a CudnnRNNV3 op whose weights are none of the fused layers' buffers")
        operators += _inline(model, op, canon)
        if not any(t.buffer == params.buffer for t in main.tensors if t is not params):
            model.buffers[params.buffer].data = None  # its weights now live in the spliced ops' constants
    main.operators = _live(main, operators)
    _drop_unused_tensors(main)
    _drop_unused_codes(model)
    left = sorted({c.customCode.decode() for c in model.operatorCodes if c.customCode})
    if left:
        raise UnsupportedError(f"custom op{'s' if len(left) > 1 else ''} {', '.join(left[:3])} (no builtin TFLite "
                               "op)")


def why(error: BaseException) -> str:
    """Why the model could not be converted, in one line: the refused ops' names where the converter lists them."""
    import re

    from ..errors import CudnnPortError, reason

    if isinstance(error, CudnnPortError):
        return str(error)
    ops = sorted(set(re.findall(r"\btf\.(\w+)\(", str(error))) - {CUSTOM.decode()})
    if ops:
        return f"TensorFlow's TFLite converter has no builtin op for {', '.join(ops[:3])}"
    return f"TensorFlow's TFLite converter failed: {reason(error, 160)}"


def _custom(model, op):
    return model.operatorCodes[op.opcodeIndex].customCode


def _inline(model, op, canon) -> List[object]:
    """The operators that replace custom op ``op`` (of the main subgraph) by stack ``canon``'s model."""
    fb, main, spec = schema(), model.subgraphs[0], canon.spec
    stack = fb.ModelT.InitFromPackedBuf(bytearray(build_stack(canon, stateful=True)), 0)
    sg, x, h0, c0, lengths = stack.subgraphs[0], op.inputs[0], op.inputs[1], op.inputs[2], op.inputs[4]
    read = {i for o in main.operators if o is not op for i in o.inputs} | set(main.outputs)
    unreadable = op.outputs[3:] if spec.mode == "lstm" else op.outputs[2:]
    if read & set(unreadable):
        raise UnsupportedError("the model reads a CudnnRNNV3 output that only cuDNN defines (reserve space, or a "
                               "GRU's cell state)")
    width = list(main.tensors[op.outputs[0]].shape)[-1]
    if list(main.tensors[x].shape)[-1] != spec.input_size or width != spec.num_dirs * spec.state_size:
        raise UnsupportedError(f"a CudnnRNNV3 op whose shapes do not fit its layer's spec {spec}")
    buffers = {0: 0}
    for k, b in enumerate(stack.buffers[1:], 1):
        model.buffers.append(b)
        buffers[k] = len(model.buffers) - 1
    codes = [_code(model, c) for c in stack.operatorCodes]
    first = len(model.subgraphs)
    for g in stack.subgraphs[1:]:  # a GRU's loop condition and bodies: their own tensors
        for t in g.tensors:
            t.buffer = buffers[t.buffer]
        for o in g.operators or []:
            _remap_op(o, codes, first)
        model.subgraphs.append(g)
    prefix = f"{main.tensors[op.outputs[0]].name.decode(errors='replace')}/"
    full = _full_lengths(model, lengths, x)
    tensors = {sg.inputs[0]: x, sg.outputs[0]: op.outputs[0]}
    if not full:
        tensors[sg.inputs[1]] = lengths
    for k, t in enumerate(sg.tensors):
        if k not in tensors:
            t.name, t.buffer = prefix.encode() + t.name, buffers[t.buffer]
            main.tensors.append(t)
            tensors[k] = len(main.tensors) - 1
    perm = _tensor(model, f"{prefix}batch_major", np.asarray(BATCH_MAJOR, np.int32))
    transpose = _code(model, _builtin(fb, "TRANSPOSE"))
    ops = _full_length_ops(model, x, tensors[sg.inputs[1]], f"{prefix}full_lengths") if full else []
    for k, (state, width) in enumerate([(h0, spec.state_size), (c0, spec.num_units)][:2 if spec.mode == "lstm" else 1]):
        target = tensors[sg.inputs[2 + k]]
        if _zeros(model, state):  # zeros of the layer's own, built from x's shape (see _zero_state)
            ops += _zero_state(model, x, spec.num_pseudo_layers, width, target, f"{prefix}zero_state_{k}")
        else:
            ops.append(_op(fb, transpose, [state, perm], [target]))
    for o in sg.operators:
        o.inputs = [tensors[i] if i >= 0 else i for i in o.inputs]
        o.outputs = [tensors[i] for i in o.outputs]
        _remap_op(o, codes, first)
        ops.append(o)
    for k, final in enumerate(sg.outputs[1:], 1):  # h_n, c_n back to batch-major, where the model reads them
        if op.outputs[k] in read:
            ops.append(_op(fb, transpose, [tensors[final], perm], [op.outputs[k]]))
    return ops


def _zeros(model, index, depth=0) -> bool:
    """Whether tensor ``index`` of the main subgraph is all zeros: a zero constant, or FILL of one (the states a
    fused layer starts from when none are given), through TRANSPOSE / RESHAPE."""
    main = model.subgraphs[0]
    data = model.buffers[main.tensors[index].buffer].data
    if data is not None and len(data):
        return not np.any(np.asarray(data, np.uint8))
    producer = next((o for o in main.operators if index in list(o.outputs)), None)
    if producer is None or depth > 8:
        return False
    name = _name(model, producer)
    if name == "FILL":
        return _zeros(model, producer.inputs[1], depth + 1)
    return name in ("TRANSPOSE", "RESHAPE") and _zeros(model, producer.inputs[0], depth + 1)


def _producer(model, index):
    return next((o for o in model.subgraphs[0].operators if index in list(o.outputs)), None)


def _full_lengths(model, lengths, x) -> bool:
    """Whether ``lengths`` is FILL(batch, T) with T = x's dimension 1: every sequence full length (a fused layer
    called without a mask)."""
    fill = _producer(model, lengths)
    step = _producer(model, fill.inputs[1]) if fill is not None and _name(model, fill) == "FILL" else None
    if step is None or _name(model, step) != "STRIDED_SLICE":
        return False
    shape = _producer(model, step.inputs[0])
    begin = model.buffers[model.subgraphs[0].tensors[step.inputs[1]].buffer].data
    return (shape is not None and _name(model, shape) == "SHAPE" and shape.inputs[0] == x and begin is not None
            and np.frombuffer(bytes(np.asarray(begin, np.uint8)), np.int32).tolist() == [1])


def _full_length_ops(model, x, target, name) -> List[object]:
    """Ops filling ``target`` [B] with T, both from x's shape (static at prepare time, see :func:`_zero_state`)."""
    fb = schema()
    shape, batch, steps = (_new(model, f"{name}/{label}") for label in ("shape", "batch", "time"))
    i32 = lambda label, v: _tensor(model, f"{name}/{label}", np.asarray(v, np.int32))  # noqa: E731
    return [_op(fb, _code(model, _builtin(fb, "SHAPE")), [x], [shape], "ShapeOptions", outType=fb.TensorType.INT32),
            _op(fb, _code(model, _builtin(fb, "STRIDED_SLICE")), [shape, i32("begin", [0]), i32("end", [1]),
                                                                  i32("stride", [1])], [batch], "StridedSliceOptions"),
            _op(fb, _code(model, _builtin(fb, "STRIDED_SLICE")), [shape, i32("begin_t", [1]), i32("end_t", [2]),
                                                                  i32("stride_t", [1])], [steps], "StridedSliceOptions",
                shrinkAxisMask=1),
            _op(fb, _code(model, _builtin(fb, "FILL")), [batch, steps], [target])]


def _new(model, name, dtype="INT32") -> int:
    fb, main = schema(), model.subgraphs[0]
    t = fb.TensorT()
    t.name, t.type, t.shape, t.buffer = name.encode(), getattr(fb.TensorType, dtype), [], 0
    main.tensors.append(t)
    return len(main.tensors) - 1


def _live(g, operators) -> List[object]:
    """``operators`` without those whose outputs nothing reads (the converter's lengths and zero states that the
    spliced stacks no longer take): an op sized while the model runs, even unused, makes the interpreter re-plan
    its memory mid-run."""
    while True:
        read = set(g.outputs) | {i for o in operators for i in o.inputs}
        kept = [o for o in operators if read & set(o.outputs)]
        if len(kept) == len(operators):
            return kept
        operators = kept


def _zero_state(model, x, count, width, target, name) -> List[object]:
    """Ops filling ``target`` with zeros [count, B, width], B from x's shape. The shape derives from SHAPE, which the
    interpreter evaluates at prepare time, so ``target`` has a static size: the converter's own zeros (FILL over a
    PACK of the batch) are sized only while the model runs, and a fused LSTM's variable state tensors, set from them,
    would be resized mid-run (which corrupts the interpreter's memory)."""
    fb = schema()
    i32 = lambda label, v: _tensor(model, f"{name}/{label}", np.asarray(v, np.int32))  # noqa: E731
    shape, batch, dims = (_new(model, f"{name}/{label}") for label in ("shape", "batch", "dims"))
    zero = _tensor(model, f"{name}/zero", np.float32(0))
    ops = [_op(fb, _code(model, _builtin(fb, "SHAPE")), [x], [shape], "ShapeOptions", outType=fb.TensorType.INT32),
           _op(fb, _code(model, _builtin(fb, "STRIDED_SLICE")), [shape, i32("begin", [0]), i32("end", [1]),
                                                                 i32("stride", [1])], [batch], "StridedSliceOptions"),
           _op(fb, _code(model, _builtin(fb, "CONCATENATION")), [i32("count", [count]), batch, i32("width", [width])],
               [dims], "ConcatenationOptions", axis=0),
           _op(fb, _code(model, _builtin(fb, "FILL")), [dims, zero], [target])]
    return ops


def _name(model, op):
    fb, code = schema(), model.operatorCodes[op.opcodeIndex]
    value = max(code.builtinCode, code.deprecatedBuiltinCode)
    return next(k for k, v in vars(fb.BuiltinOperator).items() if v == value and not k.startswith("_"))


def _remap_op(o, codes, first):
    """An operator of the stack's model moved into the whole model: its op code and loop subgraph indices."""
    fb = schema()
    o.opcodeIndex = codes[o.opcodeIndex]
    if o.builtinOptionsType == fb.BuiltinOptions.WhileOptions:
        o.builtinOptions.condSubgraphIndex += first - 1
        o.builtinOptions.bodySubgraphIndex += first - 1


def _builtin(fb, name):
    c = fb.OperatorCodeT()
    value = getattr(fb.BuiltinOperator, name)
    c.builtinCode, c.deprecatedBuiltinCode, c.version = value, min(value, 127), 1
    return c


def _code(model, code) -> int:
    """The index of op code ``code`` in ``model``, appended if new."""
    key = (max(code.builtinCode, code.deprecatedBuiltinCode), code.customCode, code.version)
    for k, c in enumerate(model.operatorCodes):
        if (max(c.builtinCode, c.deprecatedBuiltinCode), c.customCode, c.version) == key:
            return k
    model.operatorCodes.append(code)
    return len(model.operatorCodes) - 1


def _tensor(model, name, value) -> int:
    fb, main = schema(), model.subgraphs[0]
    b = fb.BufferT()
    b.data = np.frombuffer(value.tobytes(), np.uint8)
    model.buffers.append(b)
    t = fb.TensorT()
    t.name, t.shape, t.buffer = name.encode(), list(value.shape), len(model.buffers) - 1
    t.type = fb.TensorType.INT32 if value.dtype == np.int32 else fb.TensorType.FLOAT32
    main.tensors.append(t)
    return len(main.tensors) - 1


def _op(fb, code, inputs, outputs, options="TransposeOptions", **fields):
    o = fb.OperatorT()
    o.opcodeIndex, o.inputs, o.outputs = code, inputs, outputs
    if options:
        o.builtinOptionsType = getattr(fb.BuiltinOptions, options)
        o.builtinOptions = getattr(fb, options + "T")()
        for key, value in fields.items():
            setattr(o.builtinOptions, key, value)
    return o


def _drop_unused_tensors(g):
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


def _drop_unused_codes(model):
    """Op codes no operator uses (the custom op's) removed, the operators' indices renumbered."""
    used = sorted({o.opcodeIndex for g in model.subgraphs for o in g.operators or []})
    renumber = {old: new for new, old in enumerate(used)}
    model.operatorCodes = [model.operatorCodes[k] for k in used]
    for g in model.subgraphs:
        for o in g.operators or []:
            o.opcodeIndex = renumber[o.opcodeIndex]


def _signature(model, input_names, output_names):
    """SignatureDef ``serving_default``: the main subgraph's inputs by the model's input names, its outputs as
    ``output_names``; the tensors named the same, for ``get_input_details`` / ``get_output_details``."""
    fb, main = schema(), model.subgraphs[0]
    by_name = {main.tensors[i].name.decode(): i for i in main.inputs}
    if sorted(by_name) != sorted(input_names) or len(main.outputs) != len(output_names):
        raise UnsupportedError(f"the converted model takes {sorted(by_name)} and returns {len(main.outputs)} "
                               f"outputs; the model takes {sorted(input_names)} and returns {len(output_names)}")
    main.inputs = [by_name[n] for n in input_names]
    entries = []
    for names, indices in ((input_names, main.inputs), (output_names, main.outputs)):
        found = []
        for name, index in zip(names, indices):
            main.tensors[index].name = name.encode()
            m = fb.TensorMapT()
            m.name, m.tensorIndex = name, index
            found.append(m)
        entries.append(found)
    s = fb.SignatureDefT()
    s.signatureKey, s.subgraphIndex, (s.inputs, s.outputs) = SIGNATURE, 0, entries
    model.signatureDefs = [s]


def serialize(model) -> bytes:
    import flatbuffers

    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())
