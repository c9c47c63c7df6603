"""What LiteRT sizes at prepare time in the whole model's ``model.tflite`` (:mod:`.tflite_model`): every input of
dynamic batch given the batch the model declares (:func:`set_declared_batch`), the refusal of a model where an op
before a fused LSTM is sized only at run time (:func:`check_static`), and zero states and full lengths rebuilt from
``SHAPE`` of the input (:func:`static_fill`). LiteRT (2.3) re-plans its memory for a tensor sized mid-run and, on a
later call with a smaller batch, aborts the whole process.
"""
from typing import Any, List, Optional, Set

import numpy as np

from . import tflite_edit as edit
from .tflite_fb import schema
from ..errors import UnsupportedError


def set_declared_batch(model: Any, batch: Optional[int]) -> None:
    """Give every input of dynamic batch (-1 in its shape signature) ``batch`` rows until it is resized. The
    converter leaves such an input at 1 row, and a fused LSTM's state inputs take the batch a caller feeds them: a
    caller who resizes only the sequence input to the model's own batch (a stateful layer's, whose state inputs it
    never touches) had LiteRT refuse to prepare the model, ``NumElements(output_state) != n_batch * n_output``
    (LiteRT 2.3, unidirectional_sequence_lstm.cc). The signature stays dynamic: any other batch is one
    ``resize_tensor_input`` of every input away, as the signature runner does."""
    if not batch:
        return
    main = model.subgraphs[0]
    for index in main.inputs:
        t = main.tensors[index]
        signature = list(t.shapeSignature) if t.shapeSignature is not None else []
        if signature and signature[0] == -1 and t.shape is not None and len(t.shape):
            t.shape = [int(batch)] + list(t.shape)[1:]


# ops whose output shape depends on the values of these inputs: sized at prepare time only where those are known
VALUE_SHAPED = {"RESHAPE": (1,), "FILL": (0,), "BROADCAST_TO": (1,), "TILE": (1,), "SLICE": (1, 2), "RANGE": (0, 1, 2),
                "STRIDED_SLICE": (1, 2, 3), "PAD": (1,), "PADV2": (1,), "MIRROR_PAD": (1,), "TOPK_V2": (1,)}


def check_static(model: Any) -> None:
    """Refuse a model where an op before a fused LSTM yields a tensor sized only while the model runs: LiteRT (2.3)
    then re-plans its memory mid-run, and on a later call with a smaller batch aborts the whole process (measured:
    a Dense over [B, T, F] before the LSTM, which TF's converter reshapes through GATHER / PACK of the shape). Known
    at prepare time: constants, SHAPE of a tensor of known size, STRIDED_SLICE / CONCATENATION of such values."""
    main = model.subgraphs[0]
    names = [edit.name(model, o) for o in main.operators]
    if "UNIDIRECTIONAL_SEQUENCE_LSTM" not in names:
        return
    known = {k for k, t in enumerate(main.tensors) if model.buffers[t.buffer].data is not None}
    late: Set[int] = set()
    for o, name in zip(main.operators[:len(names) - names[::-1].index("UNIDIRECTIONAL_SEQUENCE_LSTM")], names):
        inputs = [i for i in o.inputs if i >= 0]
        if late & set(inputs):
            late |= set(o.outputs)
        elif name == "SHAPE" or name in ("STRIDED_SLICE", "CONCATENATION") and known >= set(inputs):
            known |= set(o.outputs)
        elif any(k < len(o.inputs) and o.inputs[k] not in known for k in VALUE_SHAPED.get(name, ())):
            late |= set(o.outputs)
    if late:
        first = main.tensors[min(late, key=lambda i: [k for k, o in enumerate(main.operators) if i in o.outputs])]
        raise UnsupportedError(f"a fused LSTM comes after {first.name.decode(errors='replace')}, which LiteRT sizes "
                               "only at run time (it aborts on such a model when the batch shrinks)")


def static_fill(model: Any, x: int, target: int, name: str, count: Optional[int] = None,
                width: Optional[int] = None) -> List[object]:
    """Ops filling ``target`` with zeros [count, B, width] (``count`` given) or with T [B] (sequence lengths, all
    full), B and T from x's shape. They derive from SHAPE, which the interpreter evaluates at prepare time, so
    ``target`` has a static size. The converter's own zeros and lengths (FILL over a PACK / RESHAPE of the batch)
    are sized only while the model runs; a fused LSTM's variable state tensors set from them, or any op after them,
    would be resized mid-run, which corrupts LiteRT's memory (measured: LiteRT 2.3 aborts on a smaller batch)."""
    fb = schema()
    i32 = lambda label, v: edit.tensor(model, f"{name}/{label}", np.asarray(v, np.int32))
    code = lambda op: edit.code(model, edit.builtin(fb, op))
    shape, batch = edit.tensor(model, f"{name}/shape"), edit.tensor(model, f"{name}/batch")
    ops = [edit.op(fb, code("SHAPE"), [x], [shape], "ShapeOptions", outType=fb.TensorType.INT32),
           edit.op(fb, code("STRIDED_SLICE"), [shape, i32("begin", [0]), i32("end", [1]), i32("stride", [1])], [batch],
               "StridedSliceOptions")]
    dims = batch
    if count is None:  # T, a scalar
        value = edit.tensor(model, f"{name}/time")
        ops.append(edit.op(fb, code("STRIDED_SLICE"), [shape, i32("begin_t", [1]), i32("end_t", [2]),
                                                   i32("stride_t", [1])], [value], "StridedSliceOptions",
                       shrinkAxisMask=1))
    else:
        dims, value = edit.tensor(model, f"{name}/dims"), edit.tensor(model, f"{name}/zero", np.zeros((), np.float32))
        ops.append(edit.op(fb, code("CONCATENATION"), [i32("count", [count]), batch, i32("width", [width])], [dims],
                       "ConcatenationOptions", axis=0))
    return ops + [edit.op(fb, code("FILL"), [dims, value], [target], None)]
