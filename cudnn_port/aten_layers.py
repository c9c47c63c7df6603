"""One Keras layer, :class:`AtenOp`, for the ATen operations a whole PyTorch program runs around its recurrent layers
(:mod:`cudnn_port.readers.torch_program` translates a ``torch.export`` graph into a Keras Functional model of
these, Keras' own ``Embedding`` and ``Dense``, and the fused layers of :mod:`cudnn_port.layers`).

A layer holds one operation by its ATen name (``permute``, ``softmax``, ``layer_norm``, ...) and its arguments as
JSON-safe data, so a ``.keras`` file of such a model loads in Keras' safe mode:

- ``{"t": k}``: the layer's k-th input tensor; ``{"c": k}``: its k-th constant (a non-trainable weight: a parameter
  of the program that is not a recurrent layer's, an Embedding's or a Linear's);
- ``{"v": value}``: a literal (int, float, bool, None);
- ``{"dims": [[k, axis], ...], "scale": n}``: the product of those dimensions of the input tensors, read when the
  layer runs, times ``n`` (1 where absent) (a batch or a time size, which the program recorded as numbers at the size
  it was exported at);
- ``{"list": [arg, ...]}``: a list of the above (a size, a list of tensors).

Each operation computes what PyTorch's CPU kernel computes, in TensorFlow ops that SavedModel, tf2onnx and LiteRT's
builtin ops all hold; the semantics are PyTorch's (torch/_refs and the ATen docs): ``squeeze`` of a dimension that is
not 1 is the identity (the translator decides that from the program's recorded sizes), ``gelu`` is the erf form unless
``approximate="tanh"``, ``layer_norm`` normalises over the last ``len(normalized_shape)`` dimensions with the biased
variance.
"""
from typing import Any, Dict, List, Sequence

import keras

from .deps import import_tf


def _resolve(arg, tensors, constants):
    tf = import_tf()
    if "t" in arg:
        return tensors[arg["t"]]
    if "c" in arg:
        return constants[arg["c"]]
    if "v" in arg:
        return arg["v"]
    if "dims" in arg:
        size = arg.get("scale", 1)
        for k, axis in arg["dims"]:
            size = size * tf.shape(tensors[k], out_type="int32")[axis]
        return size
    if "list" in arg:
        return [_resolve(a, tensors, constants) for a in arg["list"]]
    raise ValueError(f"an AtenOp argument of no known kind: {arg!r}")


def _shape(values):
    """A size list of ints and scalar tensors as one int32 tensor (a list of ints where all are known)."""
    tf = import_tf()
    if all(isinstance(v, int) for v in values):
        return list(values)
    return tf.stack([tf.cast(v, "int32") if not isinstance(v, int) else tf.constant(v, "int32") for v in values])


def _axis(dim, rank):
    return dim + rank if dim < 0 else dim


def _select(x, dim, index):
    tf = import_tf()
    dim = _axis(dim, x.shape.rank)
    if index < 0:
        index = tf.shape(x, out_type="int32")[dim] + index
    return tf.gather(x, index, axis=dim)


def _slice(x, dim=0, start=None, end=None, step=1):
    dim = _axis(dim, x.shape.rank)
    end = None if end is not None and end >= 2 ** 62 else end
    start = None if start == 0 else start
    return x[(slice(None),) * dim + (slice(start, end, step),)]


def _flatten(x, start=0, end=-1):
    tf = import_tf()
    rank = x.shape.rank
    start, end = _axis(start, rank), _axis(end, rank)
    if start >= end:
        return x
    s = tf.shape(x, out_type="int32")
    return tf.reshape(x, tf.concat([s[:start], [tf.reduce_prod(s[start:end + 1])], s[end + 1:]], 0))


def _transpose(x, dim0, dim1):
    tf = import_tf()
    rank = x.shape.rank
    perm = list(range(rank))
    a, b = _axis(dim0, rank), _axis(dim1, rank)
    perm[a], perm[b] = perm[b], perm[a]
    return tf.transpose(x, perm)


def _layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True):
    tf = import_tf()
    axes = list(range(-len(normalized_shape), 0))
    mean, var = tf.nn.moments(x, axes, keepdims=True)
    y = (x - mean) * tf.math.rsqrt(var + eps)
    if weight is not None:
        y = y * weight
    return y + bias if bias is not None else y


def _convolution(x, weight, bias=None, stride=(1,), padding=(0,), dilation=(1,), groups=1):
    """PyTorch's conv1d / conv2d (channels first, zero padding on both sides of each spatial dim) as TensorFlow's
    channels-last convolution between two transposes."""
    tf = import_tf()
    rank = x.shape.rank
    spatial = rank - 2
    stride, padding, dilation = ([int(v)] * spatial if isinstance(v, int) else [int(u) for u in v]
                                 for v in (stride, padding, dilation))
    last = tf.transpose(x, [0] + list(range(2, rank)) + [1])
    if any(padding):
        last = tf.pad(last, [[0, 0]] + [[p, p] for p in padding] + [[0, 0]])
    kernel = tf.transpose(weight, list(range(2, rank)) + [1, 0])  # [Cout, Cin, k...] -> [k..., Cin, Cout]
    y = tf.nn.convolution(last, kernel, strides=stride, padding="VALID", dilations=dilation)
    if bias is not None:
        y = y + bias
    return tf.transpose(y, [0, rank - 1] + list(range(1, rank - 1)))


def _batch_norm(x, weight, bias, mean, var, training=False, momentum=0.1, eps=1e-5, *_):
    """Inference batch norm over channel axis 1 with the running statistics."""
    tf = import_tf()
    shape = [1, -1] + [1] * (x.shape.rank - 2)
    y = (x - tf.reshape(mean, shape)) * tf.reshape(tf.math.rsqrt(var + eps), shape)
    if weight is not None:
        y = y * tf.reshape(weight, shape)
    return y + tf.reshape(bias, shape) if bias is not None else y


def _split(x, sizes, dim=0):
    """``split_with_sizes``: a list of tensors of these sizes along ``dim``."""
    tf = import_tf()
    return tf.split(x, [int(n) for n in sizes], axis=_axis(dim, x.shape.rank))


def _reduce(fn):
    def reduce(x, dim=None, keepdim=False, dtype=None):
        axis = None if not dim else [_axis(d, x.shape.rank) for d in (dim if isinstance(dim, list) else [dim])]
        return fn(x, axis=axis, keepdims=bool(keepdim))
    return reduce


def _ops() -> Dict[str, Any]:
    tf = import_tf()
    return {
        "identity": lambda x, *_: x,
        "linear": lambda x, w, b=None: tf.linalg.matmul(x, w, transpose_b=True) + (0.0 if b is None else b),
        "addmm": lambda b, m1, m2, beta=1, alpha=1: beta * b + alpha * tf.linalg.matmul(m1, m2),
        "matmul": lambda a, b: tf.linalg.matmul(a, b),
        "t": lambda x: tf.transpose(x),
        "select": _select,
        "slice": _slice,
        "cat": lambda xs, dim=0: tf.concat(xs, axis=_axis(dim, xs[0].shape.rank)),
        "stack": lambda xs, dim=0: tf.stack(xs, axis=_axis(dim, xs[0].shape.rank + 1)),
        "reshape": lambda x, size: tf.reshape(x, _shape(size)),
        "permute": lambda x, dims: tf.transpose(x, [_axis(d, x.shape.rank) for d in dims]),
        "transpose": _transpose,
        "flatten": _flatten,
        "squeeze": lambda x, dims: tf.squeeze(x, [_axis(d, x.shape.rank) for d in dims]) if dims else x,
        "unsqueeze": lambda x, dim: tf.expand_dims(x, _axis(dim, x.shape.rank + 1)),
        "relu": tf.nn.relu,
        "tanh": tf.math.tanh,
        "sigmoid": tf.math.sigmoid,
        "gelu": lambda x, approximate="none": tf.nn.gelu(x, approximate=approximate == "tanh"),
        "softmax": lambda x, dim, *_: tf.nn.softmax(x, axis=_axis(dim, x.shape.rank)),
        "log_softmax": lambda x, dim, *_: tf.nn.log_softmax(x, axis=_axis(dim, x.shape.rank)),
        "mean": _reduce(tf.reduce_mean),
        "sum": _reduce(tf.reduce_sum),
        "layer_norm": _layer_norm,
        "add": lambda x, y, alpha=1: x + (y if alpha == 1 else alpha * y),
        "sub": lambda x, y, alpha=1: x - (y if alpha == 1 else alpha * y),
        "rsub": lambda x, y, alpha=1: y - (x if alpha == 1 else alpha * x),
        "mul": lambda x, y: x * y,
        "div": lambda x, y: x / y,
        "zeros": lambda size: tf.zeros(_shape(size)),
        "convolution": _convolution,
        "batch_norm": _batch_norm,
        "split": _split,
    }


OPS = ("identity", "linear", "addmm", "matmul", "t", "select", "slice", "cat", "stack", "reshape", "permute",
       "transpose", "flatten", "squeeze", "unsqueeze", "relu", "tanh", "sigmoid", "gelu", "softmax", "log_softmax",
       "mean", "sum", "layer_norm", "add", "sub", "rsub", "mul", "div", "zeros", "convolution", "batch_norm",
       "split")


def run_op(op: str, args: List[Dict[str, Any]], tensors: List[Any], constants: List[Any]) -> Any:
    """``op`` on its encoded ``args`` (see the module docstring), eagerly or in a trace."""
    return _ops()[op](*[_resolve(a, tensors, constants) for a in args])


@keras.saving.register_keras_serializable(package="cudnn_port")
class AtenOp(keras.layers.Layer):
    """One ATen operation of a translated PyTorch program (see the module docstring): ``op`` its name, ``args`` its
    encoded arguments, ``constants`` the (shape, dtype) of each constant it holds."""

    def __init__(self, op: str, args: List[Dict[str, Any]], constants: Sequence[List[Any]] = (), **kwargs):
        kwargs.setdefault("autocast", False)
        super().__init__(**kwargs)
        if op not in OPS:
            raise ValueError(f"Received op={op!r}, expected one of {', '.join(OPS)}")
        self.op, self.args, self.constant_specs = op, list(args), [list(c) for c in constants]

    def build(self, input_shape: Any) -> None:
        self.constants = [self.add_weight(name=f"constant_{i}", shape=tuple(shape), dtype=dtype, trainable=False,
                                          initializer="zeros") for i, (shape, dtype) in enumerate(self.constant_specs)]

    def call(self, inputs: Any) -> Any:
        tensors = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        return run_op(self.op, self.args, tensors, [c.value for c in self.constants])

    def get_config(self) -> Dict[str, Any]:
        config = super().get_config()
        config.update(op=self.op, args=self.args, constants=self.constant_specs)
        return config


@keras.saving.register_keras_serializable(package="cudnn_port")
class TorchEmbedding(keras.layers.Embedding):
    """``aten.embedding``: Keras' ``Embedding`` (its weights, config and int8 handling) with PyTorch's lookup, one
    gather. Keras' own lookup first maps negative ids to the end of the table (``ops.take``), which PyTorch refuses,
    so it costs five element-wise ops on every call of the artifacts for a case a PyTorch model never has."""

    def call(self, inputs: Any) -> Any:
        tf = import_tf()
        return tf.gather(self.embeddings, tf.cast(inputs, "int32") if inputs.dtype != "int32" else inputs)
