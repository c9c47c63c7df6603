"""tf2onnx handler for TensorFlow's ``CTCGreedyDecoder``, used instead of tf2onnx's own (which fails or is wrong
on inputs every OCR model meets; docs/conventions.md, section 7.1):

* when no row decodes a label (a blank image), tf2onnx's decoded shape is ``ReduceMax`` over the empty list of
  indices, plus one: onnxruntime's ReduceMax of nothing is the lowest int64, so the shape's time dimension is
  negative and the ``Expand`` that ``tf.sparse.to_dense`` becomes fails (TensorFlow gives ``[batch, 0]``);
* it ignores the op's ``blank_index`` attribute and always takes the last class as blank, so Keras 3's
  ``ops.ctc_decode`` (``mask_index=0``) decodes wrong ids without a word.

The math, as TensorFlow's kernel computes it (``inputs [T, B, C]``, ``sequence_length [B]``, ``blank`` =
``blank_index`` or, when negative, ``C + blank_index``)::

    best[t, b] = argmax_c inputs[t, b, c]                  (the first of equal maxima)
    keep[t, b] = t < sequence_length[b] and best[t, b] != blank
                 [and best[t, b] != best[t - 1, b]  if merge_repeated; best[-1, b] = -1]
    row b decodes best[t, b] for t where keep[t, b], in time order
    decoded_indices [N, 2] = (b, position of the label in its row);  decoded_values [N] = the labels
    decoded_shape [2] = (B, max(0, longest row));  log_probability [B, 1] = -sum_{t < length} max_c inputs[t, b, c]
"""
from typing import Any

import numpy as np

_INT64, _BOOL = 7, 9  # onnx.TensorProto.INT64, BOOL


def ctc_greedy_decoder_handler(ctx: Any, node: Any, name: str, args: Any) -> None:
    """Replace CTCGreedyDecoder node ``node`` of tf2onnx graph ``ctx`` by the ONNX ops of the module docstring;
    its four outputs keep their consumers."""
    # lazy: tf2onnx, loaded on first use (import cudnn_port stays light)
    from tf2onnx import utils

    inputs, lengths = node.input[0], node.input[1]
    float_type = ctx.get_dtype(inputs)
    merge_repeated = bool(node.get_attr_value("merge_repeated", False))
    blank_index = int(node.get_attr_value("blank_index", -1))
    prefix = f"{name}/ctc/"

    def make(op, ins, dtype, rank, **attrs):
        return ctx.make_node(op, ins, attr=attrs, dtypes=[dtype], shapes=[[-1] * rank],
                             op_name_scope=prefix).output[0]

    made = {}

    def const(label, values, dtype=np.int64):  # one node per label: each label always holds the same values
        if label not in made:
            made[label] = ctx.make_const(f"{prefix}{label}", np.array(values, dtype)).output[0]
        return made[label]

    def reduce(op, data, axis, dtype, rank):  # ReduceMax takes its axes as an input from opset 18, ReduceSum from 13
        if op == "ReduceMax" and ctx.opset < 18:
            return make(op, [data], dtype, rank, axes=[axis], keepdims=0)
        return make(op, [data, const(f"axis_{op}_{axis}", [axis])], dtype, rank, keepdims=0)

    shape = make("Shape", [inputs], _INT64, 1)

    def dim(axis):  # [1]: T, B or C
        return make("Slice", [shape, const(f"from_{axis}", [axis]), const(f"to_{axis}", [axis + 1])], _INT64, 1)

    def unsqueeze(tensor, axis, dtype, rank):
        return make("Unsqueeze", [tensor, const(f"axis_{axis}", [axis])], dtype, rank)

    def both(a, b):
        return make("And", [a, b], _BOOL, 2)

    def differ(a, b):
        return make("Not", [make("Equal", [a, b], _BOOL, 2)], _BOOL, 2)

    best = make("ArgMax", [inputs], _INT64, 2, axis=2, keepdims=0)  # [T, B]
    steps = make("Range", [const("zero", 0), make("Squeeze", [dim(0)], _INT64, 0), const("one", 1)], _INT64, 1)
    length = unsqueeze(make("Cast", [lengths], _INT64, 1, to=_INT64), 0, _INT64, 2)  # [1, B]
    valid = make("Less", [unsqueeze(steps, 1, _INT64, 2), length], _BOOL, 2)  # [T, B]
    blank = const("blank", [blank_index]) if blank_index >= 0 else \
        make("Add", [dim(2), const("blank_from_end", [blank_index])], _INT64, 1)
    keep = both(valid, differ(best, blank))
    if merge_repeated:  # best[t - 1, b], -1 before the first step
        before = make("Expand", [const("minus_one", [[-1]]), make("Concat", [const("one_1", [1]), dim(1)], _INT64,
                                                                    1, axis=0)], _INT64, 2)  # [1, B]
        earlier = make("Slice", [best, const("first", [0]), const("last", [-1]), const("time", [0])], _INT64, 2)
        keep = both(keep, differ(best, make("Concat", [before, earlier], _INT64, 2, axis=0)))

    keep = make("Transpose", [keep], _BOOL, 2, perm=[1, 0])  # [B, T] from here on
    counted = make("Cast", [keep], _INT64, 2, to=_INT64)
    place = make("CumSum", [counted, const("along_t", 1)], _INT64, 2, exclusive=1)  # a kept step's place in its row
    kept = make("Transpose", [make("NonZero", [keep], _INT64, 2)], _INT64, 2, perm=[1, 0])  # [N, 2]: (b, t), sorted
    values = make("GatherND", [make("Transpose", [best], _INT64, 2, perm=[1, 0]), kept], _INT64, 1)  # [N]
    rows = make("Slice", [kept, const("col_0", [0]), const("col_1", [1]), const("cols", [1])], _INT64, 2)  # [N, 1]
    indices = make("Concat", [rows, unsqueeze(make("GatherND", [place, kept], _INT64, 1), 1, _INT64, 2)], _INT64, 2,
                   axis=1)  # [N, 2]: (b, place)
    counts = make("Concat", [const("no_label", [0]), reduce("ReduceSum", counted, 1, _INT64, 1)], _INT64, 1, axis=0)
    longest = unsqueeze(reduce("ReduceMax", counts, 0, _INT64, 0), 0, _INT64, 1)  # never over nothing: 0 leads
    dense_shape = make("Concat", [dim(1), longest], _INT64, 1, axis=0)  # [2]
    zero = const("zero_value", 0, utils.map_onnx_to_numpy_type(float_type))
    in_length = make("Where", [unsqueeze(valid, 2, _BOOL, 3), inputs, zero], float_type, 3)  # 0 past a length
    total = reduce("ReduceSum", reduce("ReduceMax", in_length, 2, float_type, 2), 0, float_type, 1)  # [B]
    log_probability = make("Neg", [unsqueeze(total, 1, float_type, 2)], float_type, 2)  # [B, 1]
    outputs = list(node.output)
    ctx.remove_node(node.name)
    for old, new in zip(outputs, (indices, values, dense_shape, log_probability)):
        ctx.replace_all_inputs(old, new)
