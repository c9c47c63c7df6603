"""tf2onnx handler for TensorFlow's ``CTCGreedyDecoder``, used instead of tf2onnx's own (which fails or is wrong
on inputs every OCR model meets; docs/conventions.md, section 7):

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
import numpy as np

_INT64, _BOOL = 7, 9  # onnx.TensorProto.INT64, BOOL


def ctc_greedy_decoder_handler(ctx, node, name, args) -> None:
    """Replace CTCGreedyDecoder node ``node`` of tf2onnx graph ``ctx`` by the ONNX ops of the module docstring;
    its four outputs keep their consumers."""
    from tf2onnx import utils

    inputs, lengths = node.input[0], node.input[1]
    float_type = ctx.get_dtype(inputs)
    merge_repeated = bool(node.get_attr_value("merge_repeated", False))
    blank_index = int(node.get_attr_value("blank_index", -1))
    prefix = f"{name}/ctc/"

    def make(op, ins, dtype, rank, **attrs):
        return ctx.make_node(op, ins, attr=attrs, dtypes=[dtype], shapes=[[-1] * rank],
                             op_name_scope=prefix).output[0]

    def const(label, values, dtype=np.int64):
        return ctx.make_const(f"{prefix}{label}", np.array(values, dtype)).output[0]

    def reduce(op, data, axis, dtype, rank):  # ReduceMax takes its axes as an input from opset 18, ReduceSum from 13
        if op == "ReduceMax" and ctx.opset < 18:
            return make(op, [data], dtype, rank, axes=[axis], keepdims=0)
        return make(op, [data, const(f"axis_{op}_{axis}", [axis])], dtype, rank, keepdims=0)

    shape = make("Shape", [inputs], _INT64, 1)
    best = make("ArgMax", [inputs], _INT64, 2, axis=2, keepdims=0)  # [T, B]
    steps = make("Range", [const("zero", 0), make("Squeeze", [make("Slice", [shape, const("s0", [0]),
                                                                          const("s1", [1])], _INT64, 1)], _INT64, 0),
                           const("one", 1)], _INT64, 1)
    length = make("Unsqueeze", [make("Cast", [lengths], _INT64, 1, to=_INT64), const("ax0", [0])], _INT64, 2)
    valid = make("Less", [make("Unsqueeze", [steps, const("ax1", [1])], _INT64, 2), length], _BOOL, 2)  # [T, B]
    if blank_index < 0:
        classes = make("Slice", [shape, const("s2", [2]), const("s3", [3])], _INT64, 1)
        blank = make("Add", [classes, const("blank_offset", [blank_index])], _INT64, 1)
    else:
        blank = const("blank", [blank_index])
    keep = make("And", [valid, make("Not", [make("Equal", [best, blank], _BOOL, 2)], _BOOL, 2)], _BOOL, 2)
    if merge_repeated:  # best[t - 1], with -1 before the first step
        batch = make("Slice", [shape, const("s1b", [1]), const("s2b", [2])], _INT64, 1)
        before = make("Expand", [const("minus_one", [[-1]]), make("Concat", [const("one_1", [1]), batch],
                                                                    _INT64, 1, axis=0)], _INT64, 2)
        shifted = make("Slice", [best, const("from", [0]), const("to", [-1]), const("axis_t", [0])], _INT64, 2)
        previous = make("Concat", [before, shifted], _INT64, 2, axis=0)
        keep = make("And", [keep, make("Not", [make("Equal", [best, previous], _BOOL, 2)], _BOOL, 2)], _BOOL, 2)
    keep_bt = make("Transpose", [keep], _BOOL, 2, perm=[1, 0])  # [B, T]
    counted = make("Cast", [keep_bt], _INT64, 2, to=_INT64)
    position = make("CumSum", [counted, const("axis_cum", 1)], _INT64, 2, exclusive=1)  # label's place in its row
    where = make("Transpose", [make("NonZero", [keep_bt], _INT64, 2)], _INT64, 2, perm=[1, 0])  # [N, 2] (b, t)
    values = make("GatherND", [make("Transpose", [best], _INT64, 2, perm=[1, 0]), where], _INT64, 1)
    rows = make("Slice", [where, const("c0", [0]), const("c1", [1]), const("axis_c", [1])], _INT64, 2)
    places = make("Unsqueeze", [make("GatherND", [position, where], _INT64, 1), const("ax1b", [1])], _INT64, 2)
    indices = make("Concat", [rows, places], _INT64, 2, axis=1)
    counts = reduce("ReduceSum", counted, 1, _INT64, 1)  # [B]; a zero in front: the max of no rows is 0
    longest = make("Unsqueeze", [reduce("ReduceMax", make("Concat", [const("none", [0]), counts], _INT64, 1,
                                                          axis=0), 0, _INT64, 0), const("ax0b", [0])], _INT64, 1)
    dense_shape = make("Concat", [make("Slice", [shape, const("s1c", [1]), const("s2c", [2])], _INT64, 1),
                                  longest], _INT64, 1, axis=0)
    kept = make("Where", [make("Unsqueeze", [valid, const("ax2", [2])], _BOOL, 3), inputs,
                          const("zero_f", 0, utils.map_onnx_to_numpy_type(float_type))], float_type, 3)
    best_value = reduce("ReduceMax", kept, 2, float_type, 2)  # [T, B]; 0 past a row's length
    log_probability = make("Neg", [make("Unsqueeze", [reduce("ReduceSum", best_value, 0, float_type, 1),
                                                      const("ax1c", [1])], float_type, 2)], float_type, 2)
    outputs = list(node.output)
    ctx.remove_node(node.name)
    for old, new in zip(outputs, (indices, values, dense_shape, log_probability)):
        ctx.replace_all_inputs(old, new)
