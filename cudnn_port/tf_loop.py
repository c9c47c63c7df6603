"""One direction's time loop of :mod:`cudnn_port.tf_graph`, in standard TensorFlow ops (the runtime facts it relies
on: docs/conventions.md, section 8; the measurements behind each choice: docs/performance.md, "The loop").

Per step, with g_t = XW[t] (the input product, precomputed for all steps)::

    g   = g_t + h @ Rh             (MatMul, below)                          [B, G*H]
    LSTM  i, f, o = σ of g's blocks 0, 1, 3 (one σ over all four; one a block for a function over the last axis,
          PER_BLOCK), c~ = tanh of block 2 (cuDNN's gate order);
          c' = f*c + i*c~;  h' = o*tanh(c')  (then h' @ P with a projection)
    GRU   r, z = σ(g_r), σ(g_z);  h~ = tanh(XW_h + r * (h @ R_h + b_R_h));  h' = h~ + z*(h - h~)
          reset before (``reset_after=False``): r, z from h @ R_rz, then h~ = tanh(XW_h + (r * h) @ R_h)
    RNN   h' = act(g)   (tanh for rnn_tanh, relu for rnn_relu)

The product ``h @ Rh`` is ``MatMul`` at every batch size, the one form every runtime of the SavedModel runs
(TensorFlow.js refuses ``SparseMatMul``, "Unsupported Ops"). On 2026-12-07 (TensorFlow 2.21, an idle 2-core
machine, the benchmark stacks' SavedModel, medians of paired rounds in one process) ``SparseMatMul`` took 0.85x the
time of ``MatMul`` at batch 1 with oneDNN off and 1.04x with it on. Reading Rh transposed (``transpose_b``) took
0.90x at batch 1 but 1.84x at batch 32, so the loops would need both Rh and its transpose as constants: the LSTM's
SavedModel grew from 38 to 55 MB. Plain ``MatMul`` with one constant is kept.

The loop masks nothing: each step is the cell alone, and :func:`finish` zeroes the outputs past each length and
gathers the final states. Without selects in the loop the benchmark stacks run 4% (LSTM) to 15% (GRU) faster at
batch 1 and 10-17% at batch 32.

Batches below UNROLL_BELOW run :data:`UNROLL` steps per while_loop iteration, so the loop's own bookkeeping (several
ops per loop variable per iteration) and the read of the steps' rows are paid once per four steps: 0.94x (LSTM) and
0.98x (GRU) the time of one step per iteration at batch 1, 1.01x at batch 8 and 1.04x at 32. A second loop, one step
per iteration, runs the last T mod UNROLL steps, every step of larger batches, and the XLA export's steps
(``until``), which XLA compiles into code without TensorFlow's per-op costs.

Measured on the benchmark stacks (2 layers, both directions, hidden 512, 100 steps) by ``python
bench/bench_exports.py --only saved_model`` (the SavedModel against the ONNX export, current results in
docs/performance.md) and ``python bench/bench_step_product.py`` (the product alone).
"""
from types import ModuleType
from typing import TYPE_CHECKING, Any, Optional, Tuple

if TYPE_CHECKING:
    import tensorflow as tf

# the functions of layout.ACTIVATIONS over a vector's last axis, not element-wise: Keras' cells apply every function
# to one gate's block [B, H] at a time, so the loop applies these block by block, never over several gates' at once
# (exports.tflite_loop and exports.onnx_scan apply every function block by block)
PER_BLOCK = ("softmax", "log_softmax", "sparsemax")

def functions(tf: ModuleType) -> dict:
    """A cell's functions (RNNSpec.activation and recurrent_activation) in TensorFlow ops, by Keras' names."""
    return {"tanh": tf.tanh, "relu": tf.nn.relu, "sigmoid": tf.sigmoid,
            "hard_sigmoid": lambda v: tf.nn.relu6(v + 3.0) / 6.0,
            "linear": tf.identity, "softsign": tf.nn.softsign, "softplus": tf.math.softplus, "elu": tf.nn.elu,
            "silu": lambda v: v * tf.sigmoid(v), "gelu": lambda v: tf.nn.gelu(v, approximate=False),
            "selu": tf.nn.selu, "relu6": tf.nn.relu6, "leaky_relu": lambda v: tf.nn.leaky_relu(v, 0.2),
            "exponential": tf.exp, "mish": lambda v: v * tf.tanh(tf.math.softplus(v)),
            "hard_silu": lambda v: v * tf.nn.relu6(v + 3.0) / 6.0, "log_sigmoid": tf.math.log_sigmoid,
            "tanh_shrink": lambda v: v - tf.tanh(v), "hard_tanh": lambda v: tf.clip_by_value(v, -1.0, 1.0),
            "celu": tf.nn.elu,  # celu with Keras' alpha 1 is elu
            "hard_shrink": lambda v: tf.where(tf.abs(v) > 0.5, v, tf.zeros_like(v)),
            "soft_shrink": lambda v: v - tf.clip_by_value(v, -0.5, 0.5),
            "sparse_plus": lambda v: tf.square(tf.clip_by_value(v, -1.0, 1.0) + 1.0) / 4.0 + tf.nn.relu(v - 1.0),
            "sparse_sigmoid": lambda v: (tf.clip_by_value(v, -1.0, 1.0) + 1.0) / 2.0,
            "squareplus": lambda v: (v + tf.sqrt(v * v + 4.0)) / 2.0,
            # PER_BLOCK, over the last axis (the cell applies them one gate's block at a time)
            "softmax": tf.nn.softmax, "log_softmax": tf.nn.log_softmax, "sparsemax": lambda v: _sparsemax(tf, v)}


def _sparsemax(tf: ModuleType, v: "tf.Tensor") -> "tf.Tensor":
    """Keras 3's sparsemax over the last axis, its TensorFlow backend's ops (keras/src/backend/tensorflow/nn.py; the
    threshold is Keras', reference._sparsemax)."""
    ranked = tf.sort(v, direction="DESCENDING", axis=-1)
    running = tf.cumsum(ranked, axis=-1)
    support = ranked - (running - 1.0) / tf.range(1, tf.shape(v)[-1] + 1, dtype=v.dtype) > 0
    total = tf.reduce_sum(tf.where(support, running, tf.zeros_like(running)), axis=-1, keepdims=True)
    return tf.maximum(v - (total - 1.0) / tf.reduce_sum(tf.cast(support, v.dtype), axis=-1, keepdims=True), 0.0)


UNROLL = 4  # steps per loop iteration for batches below UNROLL_BELOW
UNROLL_BELOW = 8


def time_loop(tf: ModuleType, xw: "tf.Tensor", h0: "tf.Tensor", c0: "Optional[tf.Tensor]", Rh: "tf.Tensor",
              bh: "tf.Tensor", mode: str, until: "Optional[tf.Tensor]" = None,
              Pt: "Optional[tf.Tensor]" = None, reset_after: bool = True, activation: str = "tanh",
              recurrent_activation: str = "sigmoid", every_c: bool = True, small: bool = True
              ) -> Tuple["tf.Tensor", Optional["tf.Tensor"], "tf.Tensor", "tf.Tensor"]:
    """One direction: xw [T, B, G*H] (each step's input product; G*H static), h0 [B, S], c0 [B, H] (read for LSTM
    only), Rh [S, G*H], bh [H], Pt [H, P] or None -> (ys [T, B, S], cs [T, B, H] for LSTM, else None, h [B, S], c
    [B, H]): every step's h (and c), and the states after the last step (c0 itself for a GRU). ``every_c=False``:
    no cs (None), for callers that read only the last c (every sequence full length: no c to gather). ``mode`` is
    the spec's (``lstm``, ``gru``, ``rnn_tanh``, ``rnn_relu``; ``reset_after=False``: the reset-before GRU, its b_R_h
    in xw; ``activation``, ``recurrent_activation``: the cell's and the gates' functions, RNNSpec's,
    :func:`functions`). ``until`` (the XLA export's longest length) stops the loop there, one step per iteration.
    ``small=False``: the caller runs batches below UNROLL_BELOW in another form, so the loop of UNROLL steps is left
    out."""
    # NumPy weights (a frozen export's) become one constant each here, outside the loops: a NumPy array read in a
    # loop body is a constant of its own at every read, so the unrolled block held UNROLL + 1 copies of Rh and a
    # SavedModel of a 4-layer bidirectional LSTM of 1024 units passed protobuf's 2 GB limit
    Rh, bh = tf.convert_to_tensor(Rh), tf.convert_to_tensor(bh)
    Pt = None if Pt is None else tf.convert_to_tensor(Pt)
    steps, H, S = tf.shape(xw)[0], bh.shape[0], Rh.shape[0]
    if mode == "gru" and not reset_after:  # sliced once, not at every step
        R_rz, R_h = Rh[:, :2 * H], Rh[:, 2 * H:]
    is_lstm = mode == "lstm"
    keep_cs = is_lstm and every_c  # a written TensorArray of c costs a write per step and a stack after the loop
    act, gate = functions(tf)[activation], functions(tf)[recurrent_activation]
    U = UNROLL if until is None and small else 1

    def gates(v, n):  # the gate function of v's n blocks, as a list; one op over all where it is element-wise
        if recurrent_activation in PER_BLOCK:
            return [gate(block) for block in tf.split(v, n, axis=-1)]
        return tf.split(gate(v), n, axis=-1)

    def cell(g, h, c, product):
        if mode == "gru" and not reset_after:  # r gates h before the candidate's product: two products
            x_rz, x_h = tf.split(g, [2 * H, H], axis=-1)
            r, z = gates(x_rz + product(h, R_rz), 2)
            candidate = act(x_h + product(r * h, R_h))
            return candidate + z * (h - candidate), c
        hr = product(h, Rh)
        if is_lstm:
            g = g + hr  # gate blocks in cuDNN's order: i, f, c~, o
            # one gate function over all four blocks (block 2's unused) and a slice for c~: as few ops as one
            # over gates reordered to i, f, o, c~, with no reordering of the weights, which would copy them all
            # in every call of the fused layers
            i, f, _, o = gates(g, 4)
            c = f * c + i * act(g[..., 2 * H:3 * H])
            h = o * act(c)
            if Pt is not None:
                h = product(h, Pt)
            return h, c
        if mode != "gru":  # a plain RNN: its one block
            return act(g + hr), c
        x_rz, x_h = tf.split(g, [2 * H, H], axis=-1)
        h_rz, h_h = tf.split(hr, [2 * H, H], axis=-1)
        r, z = gates(x_rz + h_rz, 2)
        candidate = act(x_h + r * (h_h + bh))  # GRU's b_R_h sits inside r * (...)
        return candidate + z * (h - candidate), c  # (1 - z) * candidate + z * h in one op fewer

    # the carries: (t, h, ys) and, for LSTM, c and (unless every_c is False) cs; a GRU carries no c (each carry
    # costs ops every iteration)
    def block(t, h, ys, c=None, cs=None):
        # U steps' rows in one gather: XLA compiles a strided slice at a loop index to the whole tensor, and a
        # slice of U rows not at all where T < U (the loop then never runs, but XLA compiles it all the same)
        for k, g in enumerate(tf.unstack(tf.gather(xw, t + tf.range(U)), U)):
            h, c = cell(g, h, c, tf.matmul)
            ys = ys.write(t + k, h)  # a write per step, not one scatter: XLA compiles no TensorList scatter
            cs = cs.write(t + k, c) if keep_cs else cs
        return (t + U, h, ys) + ((c,) if is_lstm else ()) + ((cs,) if keep_cs else ())

    def single(t, h, ys, c=None, cs=None):
        h, c = cell(xw[t], h, c, tf.matmul)
        return (t + 1, h, ys.write(t, h)) + ((c,) if is_lstm else ()) + ((cs.write(t, c),) if keep_cs else ())

    # rank 2 where a caller's states have no static shape (graphs.rewrite): MatMul stays MatMul, not BatchMatMul
    h0, c0 = tf.reshape(h0, [-1, S]), tf.reshape(c0, [-1, H])
    batch = tf.shape(h0)[0]
    known = h0.shape[0]  # the batch, static where known: TensorArray.stack keeps it
    state: Tuple[Any, ...] = (tf.constant(0), h0, tf.TensorArray(tf.float32, size=steps, element_shape=[known, S]))
    if is_lstm:
        state += (c0,)
    if keep_cs:
        state += (tf.TensorArray(tf.float32, size=steps, element_shape=[known, H]),)
    last = steps if until is None else tf.minimum(steps, until)
    if U > 1:
        whole = tf.where(batch < UNROLL_BELOW, last // U * U, 0)
        state = tf.while_loop(lambda t, *_: t < whole, block, state)
    # maximum_iterations only in the XLA export: XLA needs a bound to differentiate a loop, and it adds a counter
    # to every iteration
    bound = {} if until is None else {"maximum_iterations": steps}
    state = tf.while_loop(lambda t, *_: t < last, single, state, **bound)
    return (state[2].stack(), state[4].stack() if keep_cs else None, state[1], state[3] if is_lstm else c0)


def finish(tf: ModuleType, ys: "tf.Tensor", cs: "Optional[tf.Tensor]", valid: "tf.Tensor", h0: "tf.Tensor",
           c0: "tf.Tensor", lengths: "tf.Tensor") -> Tuple["tf.Tensor", "tf.Tensor", "tf.Tensor"]:
    """A loop's every-step states (ys [T, B, S], cs [T, B, H] or None) -> (y [T, B, S] with zeros past each length,
    h [B, S] and c [B, H] at each sequence's last step: h0 / c0 for length 0; c0 itself when cs is None)."""
    steps = tf.shape(ys)[0]
    at = tf.stack([tf.minimum(lengths, steps), tf.range(tf.shape(lengths)[0])], axis=1)  # [B, 2]: (length, b)
    h = tf.gather_nd(tf.concat([h0[None], ys], 0), at)
    c = c0 if cs is None else tf.gather_nd(tf.concat([c0[None], cs], 0), at)
    h.set_shape(h0.shape)  # what a loop carry kept: callers' own loops need the batch size where it is known
    c.set_shape(c0.shape)
    return tf.where(valid, ys, 0.0), h, c
