"""Stock Keras layers recomputed with ops whose output shapes follow from their inputs' alone, so that LiteRT sizes
every tensor before the model runs, and with no per-step loop.

LiteRT sizes a ``RESHAPE`` whose shape is computed from ``tf.shape`` only while the model runs, and the whole-model
``model.tflite`` refuses a fused LSTM after such a tensor (LiteRT aborts on it when the batch shrinks). Keras 3
computes a ``Dense`` on a sequence as ``tf.tensordot`` (reshapes around a ``MatMul``), a ``Reshape`` with the batch
size read at run time and a ``RepeatVector`` as a reshape and ``tf.repeat``; its ``TimeDistributed`` loops over the
steps where the time axis is dynamic, which traces to TensorList ops that ONNX and TFLite do not hold. Each class here
takes such a layer's place in the rewritten model (:func:`.stock_keras.rewrite`), holding the same layer
(its variables shared), and computes the same numbers:

- :class:`SequenceDense`: ``Dense`` on ``[batch, time, ..., features]`` as one broadcasting ``MatMul``
  (``BatchMatMulV2``: ``BATCH_MATMUL`` in TFLite, ``MatMul`` in ONNX);
- :class:`FixedReshape`: ``Reshape`` to a target with no ``-1`` as a reshape to ``(-1, *target)``;
- :class:`TiledRepeat`: ``RepeatVector(n)`` as ``Tile`` of ``[batch, 1, features]`` by ``[1, n, 1]``;
- :class:`TimeFolded`: ``TimeDistributed(layer)`` as one call of ``layer`` on ``[batch * time, ...]`` (step ``i``'s
  ``mask[i]`` passed for all steps at once where ``layer`` takes a mask); exact for a layer that computes each sample
  alone (every stock layer at inference, but one that reduces over the batch axis, which the whole-model judge would
  fail). A wrapped recurrent layer (or model holding one) is called as its fused form, which holds the weights.
  Its reshapes take shapes LiteRT computes before the model runs (``SHAPE`` slices and constants); a
  ``TimeDistributed`` of a ``Dense`` is a :class:`SequenceDense`, one op.

Masks pass through each as through the layer it replaces.
"""
from typing import Any, List, Optional, Sequence, Tuple

import keras
from ..deps import import_tf


class _Replacing(keras.layers.Layer):
    """A layer in another layer's place: its name and dtype policy, the other layer held (weights shared)."""

    def __init__(self, layer: keras.layers.Layer, name: str, dtype: Any, inner: Any = None, holds: bool = True) -> None:
        super().__init__(name=name, dtype=dtype)
        self.inner = inner
        if holds:
            self.layer = layer
        else:  # untracked: ``inner`` holds the weights computed (a fused layer's), the stock ones are not its own
            object.__setattr__(self, "layer", layer)
        self.supports_masking = layer.supports_masking

    def compute_output_shape(self, input_shape: Sequence[Optional[int]]) -> Tuple[Optional[int], ...]:
        return tuple(self.layer.compute_output_shape(input_shape))


class SequenceDense(_Replacing):
    """``Dense`` computed as ``activation(x @ kernel + bias)`` with a broadcasting matmul, whatever ``x``'s rank."""

    def call(self, inputs: Any, mask: Any = None) -> Any:
        dense = self.layer
        x = import_tf().linalg.matmul(inputs, keras.ops.cast(dense.kernel, inputs.dtype))
        if dense.bias is not None:
            x = x + keras.ops.cast(dense.bias, inputs.dtype)
        return dense.activation(x) if dense.activation is not None else x


class FixedReshape(_Replacing):
    """``Reshape`` to a target shape with no ``-1``: the batch dimension is the one left to infer."""

    def call(self, inputs: Any) -> Any:
        return keras.ops.reshape(inputs, (-1, *self.layer.target_shape))


class TiledRepeat(_Replacing):
    """``RepeatVector(n)``: ``[batch, features]`` tiled to ``[batch, n, features]``."""

    def call(self, inputs: Any) -> Any:
        tf = import_tf()  # tf.tile itself: TF 2.16's TFLite converter loses the width of keras.ops.tile's output
        return tf.tile(tf.expand_dims(inputs, 1), tf.constant([1, self.layer.n, 1]))


class TimeFolded(_Replacing):
    """``TimeDistributed(layer)``: ``layer`` called once on ``[batch * time, ...]``."""

    @property
    def layers(self) -> List[keras.layers.Layer]:
        """The layer called, so that :func:`cudnn_port.layers.fused_layers` finds a fused one inside."""
        return [self.inner]

    def call(self, inputs: Any, training: Optional[bool] = None, mask: Any = None) -> Any:
        tf, inner = import_tf(), self.inner  # the wrapped layer, or the layer of this module in its place
        kwargs = {"training": training} if inner._call_has_training_arg else {}
        if mask is not None and inner._call_has_mask_arg:  # every step's mask[i] at once: [batch * time, ...]
            kwargs["mask"] = tf.reshape(mask, _folded(tf, mask))
        outputs = inner.call(tf.reshape(inputs, _folded(tf, inputs)), **kwargs)
        # [batch, time] of the input's shape joined to the rest of the output's: SHAPE, STRIDED_SLICE and
        # CONCATENATION, which LiteRT computes before the model runs (a shape packed from scalars it computes after)
        unfolded = tf.concat([tf.shape(inputs)[:2], tf.shape(outputs)[1:]], axis=0)
        return tf.reshape(outputs, unfolded)


def _folded(tf, tensor):
    """The shape ``[-1, *tensor.shape[2:]]``: constants where those dimensions are known."""
    rest = tensor.shape[2:]
    if all(d is not None for d in rest):
        return [-1, *rest]
    return tf.concat([[-1], tf.shape(tensor)[2:]], axis=0)


def _plain_dense(layer) -> bool:
    return type(layer).__name__ == "Dense" and getattr(layer, "quantization_mode", None) is None and \
        not getattr(layer, "lora_enabled", False)


def sized(layer: keras.layers.Layer, recurrent_inside: Any) -> Optional[keras.layers.Layer]:
    """The layer of this module that takes the stock ``layer``'s place, or None to keep ``layer``.
    ``recurrent_inside(layer)``: whether a layer holds a recurrent one (a ``TimeDistributed`` of one is a
    :class:`TimeFolded` around its fused form, which :func:`.stock_keras.rewrite` makes itself)."""
    if not type(layer).__module__.startswith("keras."):
        return None
    kind, args = type(layer).__name__, dict(name=layer.name, dtype=layer.dtype_policy)
    if _plain_dense(layer):
        return SequenceDense(layer, **args)
    if kind == "Reshape" and -1 not in tuple(layer.target_shape):
        return FixedReshape(layer, **args)
    if kind == "RepeatVector":
        return TiledRepeat(layer, **args)
    if kind == "TimeDistributed" and not recurrent_inside(layer.layer):
        if _plain_dense(layer.layer):
            return SequenceDense(layer.layer, **args)
        return TimeFolded(layer, inner=sized(layer.layer, recurrent_inside) or layer.layer, **args)
    return None
