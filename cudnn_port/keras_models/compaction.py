"""Any time mask [B, T] as a right-padded one, exactly: the steps a mask keeps, gathered to the front of each row.

Keras' recurrent loop skips a masked step: the states carry over unchanged, and the output there is zeros
(``zero_output_for_mask``) or the previous step's output (zeros before any kept step). A fused layer takes
right-padded masks only (sequence lengths). Running it on each row's kept steps gathered to the front, in time order
(:func:`plan`, :func:`gather_steps`), with lengths = the count of kept steps, gives the same final states, and the
output at step ``t`` is the compacted output ``c(t) - 1`` with ``c = cumsum(mask)`` (:func:`expand`). A
bidirectional fused layer's backward direction over the compacted steps is Keras' backward layer skipping the masked
steps, so the same holds for it. For a right-padded mask the gather is the identity.

Plain TensorFlow ops only (``Cumsum``, ``Equal``, ``Sum``, ``GatherV2`` with ``batch_dims=1``, ``Select``), which
tf2onnx, OpenVINO and the TFLite converter hold as builtins: no loop, no Flex op. Every shape follows from the input's
shape, so LiteRT sizes each tensor before the fused LSTM at prepare time (a sort, ``TopKV2`` with ``k = T``, would
give a tensor LiteRT sizes only at run time, and its sequence LSTM then computed wrong rows: measured). The
permutation costs a ``[B, T, T]`` comparison, small beside the recurrent layer for the lengths RNNs take.
"""
from typing import TYPE_CHECKING, Tuple

from ..deps import import_tf

if TYPE_CHECKING:
    import tensorflow as tf


def plan(mask: "tf.Tensor") -> Tuple["tf.Tensor", "tf.Tensor", "tf.Tensor"]:
    """(order [B, T]: the step at each slot, each row's kept steps first, in time order, then its masked ones;
    lengths [B]: kept steps per row; counts [B, T]: kept steps up to and including each step) of a bool ``mask``
    [B, T]. It reads the mask alone, so every layer reading one mask can share it; :func:`gather_steps` applies it."""
    tf = import_tf()
    t = tf.range(tf.shape(mask)[1])
    ones = tf.cast(mask, "int32")
    counts, lengths = tf.cumsum(ones, axis=1), tf.reduce_sum(ones, axis=1)
    slot = tf.where(mask, counts - 1, tf.expand_dims(lengths, 1) + t - counts)  # each step's place: a permutation
    hit = tf.equal(tf.expand_dims(slot, 1), tf.reshape(t, [1, -1, 1]))  # [B, slot, step]
    order = tf.reduce_sum(tf.cast(hit, "int32") * t, axis=2)  # the step at each slot
    return order, lengths, counts


def gather_steps(x: "tf.Tensor", order: "tf.Tensor") -> "tf.Tensor":
    """x [B, T, F] with step ``order[b, s]`` at slot s of row b."""
    return import_tf().gather(x, order, axis=1, batch_dims=1)


def expand(y: "tf.Tensor", mask: "tf.Tensor", counts: "tf.Tensor", zero_output: bool) -> "tf.Tensor":
    """The compacted outputs ``y`` [B, T, H] back at their steps: step ``t`` holds ``y[c(t) - 1]``, which at a masked
    step is the previous kept step's output; zeros there when ``zero_output``, and before the first kept step."""
    tf = import_tf()
    out = tf.gather(y, tf.maximum(counts - 1, 0), axis=1, batch_dims=1)
    keep = mask if zero_output else counts > 0
    return tf.where(tf.expand_dims(keep, -1), out, tf.zeros_like(out))


def last_output(h: "tf.Tensor", mask: "tf.Tensor", lengths: "tf.Tensor", zero_output: bool) -> "tf.Tensor":
    """Keras' last output ([B, H]) of a masked loop whose final output state is ``h``: the output of its last step,
    so zeros when that step is masked and ``zero_output``, or when the row keeps no step (``h`` is then h0)."""
    tf = import_tf()
    keep = mask[:, -1] if zero_output else lengths > 0
    return tf.where(tf.expand_dims(keep, -1), h, tf.zeros_like(h))
