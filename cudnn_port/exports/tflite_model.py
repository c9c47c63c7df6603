"""The whole Keras model as ONE TFLite model, builtin ops only: ``OUT/model.tflite`` (embeddings, heads and every
fused layer), for :mod:`cudnn_port.roads.model`.

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
       zero states and full-length lengths (a layer called without states / mask) rebuilt from SHAPE, so that LiteRT
       sizes them at prepare time (:mod:`.tflite_sizes`); then the ops nothing reads, the params buffer and the op codes
       nothing uses dropped: no custom op, no Flex op remains.

Why not the converter alone: it has no builtin for cuDNN's op, and the CPU trace of a fused layer (a while loop over
a TensorArray) does not convert with builtin ops at all (its TensorListReserve needs Flex). Why not our writer alone:
the rest of a model is any Keras graph, which TensorFlow's converter already lowers to builtins.
Refused (UnsupportedError, so that only the per-layer files are written): any other custom op, a read of cuDNN's
reserve outputs or a GRU's c_n, a fused layer inside a loop or branch, and a fused LSTM after an op LiteRT sizes only
at run time (:func:`.tflite_sizes.check_static`).

Interface: SignatureDef ``serving_default`` over the model's inputs (named as the model names them) returning
``output_0`` ... ``output_{n-1}``; batch and time dynamic. Every input's batch starts at the batch the model declares
(``keras.Input(batch_shape=...)``, a stateful layer's batch; else 1), so that ``allocate_tensors()`` before any
``resize_tensor_input`` prepares the model at that batch, states included
(:func:`.tflite_sizes.set_declared_batch`).
Each fused stack keeps the per-stack semantics of :mod:`cudnn_port.exports.tflite` (zero outputs past each length,
final states at each sequence's last step)::

    from ai_edge_litert.interpreter import Interpreter
    run = Interpreter("OUT/model.tflite").get_signature_runner("serving_default")
    logits = run(tokens=ids)["output_0"]
"""
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence
import re
import warnings

import numpy as np

from ..deps import import_tf
from ..errors import CudnnPortError, reason, UnsupportedError
from .tflite import SIGNATURE, build_model as build_stack
from . import tflite_edit as edit
from .tflite_fb import schema
from .tflite_sizes import check_static, set_declared_batch, static_fill

if TYPE_CHECKING:
    import tensorflow as tf

CUSTOM = b"CudnnRNNV3"
BATCH_MAJOR = [1, 0, 2]  # [B, L*D, S] <-> [L*D, B, S]


def convert(frozen: "tf.types.experimental.ConcreteFunction", input_names: Sequence[str], output_names: Sequence[str],
            canons: Dict[bytes, object], batch: Optional[int] = None) -> bytes:
    """The serialized whole model. ``frozen``: the model's concrete function traced with its fused layers on the
    cuDNN path, variables frozen into constants; ``input_names``: the names of its inputs (as its placeholders are
    named), ``output_names``: the names of its outputs in ``frozen.outputs`` order; ``canons``: {a fused layer's
    buffer as float32 bytes: its CanonicalRNN}; ``batch``: the batch the model declares, where it declares one.
    Raises :class:`~cudnn_port.errors.UnsupportedError` (or the
    converter's error) when some op has no builtin TFLite op."""
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
    check_static(model)
    set_declared_batch(model, batch)
    return edit.serialize(model)


def splice(model: Any, canons: Dict[bytes, object]) -> None:
    """Replace every CudnnRNNV3 custom op of ``model`` (a ModelT) by its stack's builtin ops, in place."""
    main, operators, spent = model.subgraphs[0], [], set()
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
        spent.add(params.buffer)
    main.operators = edit.live(main, operators)
    edit.drop_unused_tensors(main)
    for index in spent - {t.buffer for g in model.subgraphs for t in g.tensors}:
        model.buffers[index].data = None  # the weights now live in the spliced ops' constants
    edit.drop_unused_codes(model)
    left = sorted({c.customCode.decode() for c in model.operatorCodes if c.customCode})
    if left:
        raise UnsupportedError(f"custom op{'s' if len(left) > 1 else ''} {', '.join(left[:3])} (no builtin TFLite "
                               "op)")


def why(error: BaseException) -> str:
    """Why the model could not be converted, in one line: the refused ops' names where the converter lists them."""
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
    stack = fb.ModelT.InitFromPackedBuf(bytearray(build_stack(canon, stateful=True, guard_lengths=False)), 0)
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
    codes = [edit.code(model, c) for c in stack.operatorCodes]
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
    perm = edit.tensor(model, f"{prefix}batch_major", np.asarray(BATCH_MAJOR, np.int32))
    transpose = edit.code(model, edit.builtin(fb, "TRANSPOSE"))
    ops = static_fill(model, x, tensors[sg.inputs[1]], f"{prefix}full_lengths") if full else []
    states = [(h0, spec.state_size), (c0, spec.num_units)][:2 if spec.mode == "lstm" else 1]
    for k, (state, width) in enumerate(states):
        target = tensors[sg.inputs[2 + k]]
        if _zeros(model, state):  # zeros of the layer's own, built from x's shape (tflite_sizes.static_fill)
            ops += static_fill(model, x, target, f"{prefix}zero_state_{k}", spec.num_pseudo_layers, width)
        else:
            ops.append(edit.op(fb, transpose, [state, perm], [target]))
    for o in sg.operators:
        o.inputs = [tensors[i] if i >= 0 else i for i in o.inputs]
        o.outputs = [tensors[i] for i in o.outputs]
        _remap_op(o, codes, first)
        ops.append(o)
    for k, final in enumerate(sg.outputs[1:], 1):  # h_n, c_n back to batch-major, where the model reads them
        if op.outputs[k] in read:
            ops.append(edit.op(fb, transpose, [tensors[final], perm], [op.outputs[k]]))
    return ops


def _zeros(model, index, depth=0) -> bool:
    """Whether tensor ``index`` of the main subgraph is all zeros: a zero constant, or FILL of one (the states a
    fused layer starts from when none are given), through TRANSPOSE / RESHAPE."""
    data = model.buffers[model.subgraphs[0].tensors[index].buffer].data
    if data is not None and len(data):
        return not np.any(np.asarray(data, np.uint8))
    producer = edit.producer(model, index)
    if producer is None or depth > 8:
        return False
    if edit.name(model, producer) == "FILL":
        return _zeros(model, producer.inputs[1], depth + 1)
    return edit.name(model, producer) in ("TRANSPOSE", "RESHAPE") and _zeros(model, producer.inputs[0], depth + 1)


def _full_lengths(model, lengths, x) -> bool:
    """Whether ``lengths`` is FILL(batch, T) with T = x's dimension 1: every sequence full length (a fused layer
    called without a mask)."""
    fill = edit.producer(model, lengths)
    step = edit.producer(model, fill.inputs[1]) if fill is not None and edit.name(model, fill) == "FILL" else None
    if step is None or edit.name(model, step) != "STRIDED_SLICE":
        return False
    shape = edit.producer(model, step.inputs[0])
    begin = model.buffers[model.subgraphs[0].tensors[step.inputs[1]].buffer].data
    return (shape is not None and edit.name(model, shape) == "SHAPE" and shape.inputs[0] == x and begin is not None
            and np.frombuffer(bytes(np.asarray(begin, np.uint8)), np.int32).tolist() == [1])


def _remap_op(o, codes, first):
    """An operator of the stack's model moved into the whole model: its op code and loop subgraph indices."""
    fb = schema()
    o.opcodeIndex = codes[o.opcodeIndex]
    if o.builtinOptionsType == fb.BuiltinOptions.WhileOptions:
        o.builtinOptions.condSubgraphIndex += first - 1
        o.builtinOptions.bodySubgraphIndex += first - 1


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


