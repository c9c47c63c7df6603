"""What a fused layer's call makes of its mask and states (:mod:`cudnn_port.layers`): a right-padded mask as cuDNN's
sequence lengths (:func:`mask_lengths`; any other mask refused when the graph runs), once per mask tensor in the
"lean" trace (:func:`shared_lengths`), and states between the layers' batch-major form and the stack's time-major one
(:func:`swap_first_axes`).
"""
from typing import TYPE_CHECKING, Any, Optional

from .deps import import_tf
from .layer_paths import shared

if TYPE_CHECKING:
    import tensorflow as tf


def swap_first_axes(state: "tf.Tensor") -> "tf.Tensor":
    """[B, L*D, S] <-> [L*D, B, S]; where L*D is 1 as a squeeze and an expand (no copy, and a pair that graph
    optimizers cancel against the squeeze / expand around it) rather than a transpose."""
    tf = import_tf()
    if state.shape[0] == 1:
        return tf.expand_dims(tf.squeeze(state, 0), 1)
    if state.shape[1] == 1:
        return tf.expand_dims(tf.squeeze(state, 1), 0)
    return tf.transpose(state, [1, 0, 2])


def shared_lengths(mask: "Optional[tf.Tensor]", steps: Any) -> "Optional[tf.Tensor]":
    """The "lean" trace's lengths: None without a mask; else :func:`mask_lengths`, once per mask tensor."""
    return None if mask is None else shared("lengths", mask, lambda: mask_lengths(mask, None, steps))


def mask_lengths(mask: "Optional[tf.Tensor]", x: "Optional[tf.Tensor]", steps: Any) -> "tf.Tensor":
    """Sequence lengths [B] int32 from a right-padded mask [B, T]; full length (``steps``) without one (a [B] tensor
    shaped like ``x``'s first column, not filled to a computed size: LiteRT sizes it before the model runs, which a
    fused TFLite LSTM after it needs). Other masks are refused."""
    tf = import_tf()
    if mask is None:
        if x is None:
            raise ValueError("full lengths are shaped like x: pass x where there is no mask")
        return tf.cast(tf.ones_like(x[:, 0, 0]), "int32") * steps
    mask = tf.cast(mask, "bool")
    lengths = tf.reduce_sum(tf.cast(mask, "int32"), axis=1)
    padded = tf.sequence_mask(lengths, steps)
    check = tf.debugging.assert_equal(
        padded, mask, message="cudnn_port layers take right-padded masks only (True for the first `length` steps, "
        "then False); pad sequences at the end, or pass sequence data without such a mask")
    with tf.control_dependencies([check]):
        return tf.identity(lengths)
