"""One direction's time loop of :mod:`cudnn_port.tf_graph`, in standard TensorFlow ops (the runtime facts it relies
on: docs/conventions.md, section 8).

Per step, with g_t = XW[t] (the input product, precomputed for all steps)::

    g   = g_t + h @ Rh             (SparseMatMul, see below)                        [B, G*H]
    LSTM  i, f, o = σ of g's blocks 0, 1, 3 (one σ over all four), c~ = tanh of block 2 (cuDNN's gate order);
          c' = f*c + i*c~;  h' = o*tanh(c')  (then h' @ P with a projection)
    GRU   r, z = σ(g_r), σ(g_z);  h~ = tanh(XW_h + r * (h @ R_h + b_R_h));  h' = h~ + z*(h - h~)

``h @ Rh`` is ``SparseMatMul`` with both operands dense in the loop that runs batches below
:data:`UNROLL_BELOW` (four steps per iteration, below), and ``MatMul`` in the loop of one step per iteration (every
step of larger batches, the last T mod 4 steps of small ones, the XLA export's loop). ``SparseMatMul`` is a standard
op (with a gradient and an XLA kernel) whose CPU kernel is then one Eigen contraction; of the forms measured, it is
the one that TensorFlow's oneDNN rewrite leaves alone. That rewrite is on by default on x86 CPUs with AVX512_VNNI,
AVX512_BF16 or AMX (TensorFlow >= 2.9; TF_ENABLE_ONEDNN_OPTS decides), and there it turned the 1x1 ``Conv2D`` this
loop used before into ``_MklNativeFusedConv2D``: 144 us a step at batch 1 in a trace of the GRU SavedModel, where
Eigen's ``_FusedConv2D`` took 43 us. Two chains of 100 products ``[1, 512] @ [512, 1536]`` side by side, as a
layer's two directions run, took per step with oneDNN on: ``SparseMatMul`` 50-52 us, ``MatMul`` 98, ``BatchMatMulV2``
103, ``Einsum`` 101, 1x1 ``Conv2D`` 98-109, ``Conv3D`` 266; with it off: ``SparseMatMul`` 46-50 us, 1x1 ``Conv2D``
50-65, ``MatMul`` 80-83 (it splits a batch-1 product across the intra-op threads, so the two chains stall each
other). At batch 32 the two directions' products ``[32, 512] @ [512, 1536]`` took 516 us a step with ``MatMul``
under oneDNN against 661 with ``SparseMatMul``, and 594-609 us either way without oneDNN: hence ``MatMul`` for
large batches. On the bench's stacks (2 layers, both directions, hidden 512, 100 steps), in the same process in
alternating blocks, 2026-11-24, against the loop before (a 1x1 ``Conv2D`` at every batch): with oneDNN on, 0.65-0.69x
the time at batch 1; with it off, 0.97-1.02x. At batch 32, against the loop before this one (``MatMul``, one step
per iteration, masks inside the loop), 4 rounds: with oneDNN on, 1.05x (LSTM) and 0.95x (GRU) the time, where the
1x1 ``Conv2D`` took 2.0x; with it off, 0.96x and 0.96x.

The loop masks nothing: each step is the cell alone, and :func:`finish` zeroes the outputs past each length and
gathers the final states. Selects inside the loop (per state and step) took 6.5 of 19.5 ms of a one-direction LSTM
loop at batch 1 (hidden 512, 100 steps); without them the benchmark stacks of ``bench/bench_exports.py`` ran 4%
(LSTM) to 15% (GRU) faster at batch 1 and 10-17% at batch 32.

Small batches run :data:`UNROLL` steps per while_loop iteration: the loop's own bookkeeping (several ops per loop
variable per iteration) and the read of the steps' rows is then paid once per 4 steps. A second loop, one step
per iteration, runs the last T mod UNROLL steps, and all of them for batches of :data:`UNROLL_BELOW` or more and in
the XLA export (``until``), which XLA compiles into code without TensorFlow's per-op costs. Timed on the bench's
stacks (2 layers, both directions, hidden 512, 100 steps) against one step per iteration, medians of 3 to 8
rounds in alternating blocks: the LSTM took 0.94x the time unrolled at batch 1 (the GRU 0.98x), 0.99x at batch 4,
1.01x at 8, 1.04x at 16 and 1.04x at 32 (timed with one slice read and one scatter write per four steps, before
the gather and the per-step writes that XLA needs).

Measured and not kept (2026-11-25; the bench's stacks at batch 1 against this loop, in the same process, alternating
blocks of 5-6 rounds, two runs unless said): both directions in one loop, their states stacked [2, B, S] so that a
step's cell is one set of ops for both (1.02x and 1.06x the time for the LSTM, 1.04x and 1.16x for the GRU: the two
products still take most of a step, and one direction's cell no longer overlaps the other's product); the weights
made tensors once outside the loops instead of Consts run in every iteration (LSTM 0.99x-1.00x, GRU 0.94x and 1.16x:
within this machine's noise); 8 steps per iteration, the weights so made (one run: LSTM 1.07x, GRU 0.94x);
``LSTMBlockCell`` as the whole LSTM step (gates reordered to its i, c~, f, o; the step's input product as its bias,
which only batch 1 allows): on a chain of 100 steps in both directions, 1.01x the time with oneDNN off and 0.94x
with it on. Later the same day (medians of 20 per-round ratios, interquartile range in brackets, oneDNN off): one
write of the four steps stacked per iteration instead of four writes (TensorArrays of [4, B, S] elements, a second
array for the last T mod 4 steps, both concatenated after the loops; outputs equal to this loop's bit for bit):
0.99x (0.98-1.00) the time for the LSTM and 1.01x (0.97-1.03) for the GRU; on the same stacks with hidden 8 and
input 8, where the loops' own ops are nearly all the time, 0.97x and 0.95x (15 rounds).
"""
from typing import TYPE_CHECKING, Optional, Tuple

if TYPE_CHECKING:
    import tensorflow as tf

UNROLL = 4  # steps per loop iteration for batches below UNROLL_BELOW
UNROLL_BELOW = 8


def time_loop(tf, xw, h0, c0, Rh, bh, is_lstm, until=None, Pt=None) -> Tuple["tf.Tensor", Optional["tf.Tensor"]]:
    """One direction: xw [T, B, G*H] (each step's input product; G*H static), h0 [B, S], c0 [B, H] (read for LSTM
    only), Rh [S, G*H], bh [H], Pt [H, P] or None -> (ys [T, B, S], cs [T, B, H] for LSTM, else None): every step's
    h (and c). ``until`` (the XLA export's longest length) stops the loop there, one step per iteration."""
    steps, H, S = tf.shape(xw)[0], bh.shape[0], Rh.shape[0]
    U = UNROLL if until is None else 1

    def small(h, weights):  # the product of the loop for batches below UNROLL_BELOW (module docstring)
        return tf.raw_ops.SparseMatMul(a=h, b=weights)

    def cell(g, h, c, product):
        hr = product(h, Rh)
        if is_lstm:
            g = g + hr  # gate blocks in cuDNN's order: i, f, c~, o
            # one sigmoid over all four blocks (block 2's unused) and a slice for c~: as few ops as one sigmoid
            # over gates reordered to i, f, o, c~, with no reordering of the weights, which would copy them all
            # in every call of the fused layers
            i, f, _, o = tf.split(tf.sigmoid(g), 4, axis=-1)
            c = f * c + i * tf.tanh(g[..., 2 * H:3 * H])
            h = o * tf.tanh(c)
            if Pt is not None:
                h = product(h, Pt)
            return h, c
        x_rz, x_h = tf.split(g, [2 * H, H], axis=-1)
        h_rz, h_h = tf.split(hr, [2 * H, H], axis=-1)
        r, z = tf.split(tf.sigmoid(x_rz + h_rz), 2, axis=-1)
        candidate = tf.tanh(x_h + r * (h_h + bh))  # GRU's b_R_h sits inside r * (...)
        return candidate + z * (h - candidate), c  # (1 - z) * candidate + z * h in one op fewer

    # the carries: (t, h, ys) and, for LSTM, (c, cs); a GRU carries no c (each carry costs ops every iteration)
    def block(t, h, ys, c=None, cs=None):
        # U steps' rows in one gather: XLA compiles a strided slice at a loop index to the whole tensor, and a
        # slice of U rows not at all where T < U (the loop then never runs, but XLA compiles it all the same)
        for k, g in enumerate(tf.unstack(tf.gather(xw, t + tf.range(U)), U)):
            h, c = cell(g, h, c, small)
            ys = ys.write(t + k, h)  # a write per step, not one scatter: XLA compiles no TensorList scatter
            cs = cs.write(t + k, c) if is_lstm else cs
        return (t + U, h, ys) + ((c, cs) if is_lstm else ())

    def single(t, h, ys, c=None, cs=None):
        h, c = cell(xw[t], h, c, tf.matmul)
        return (t + 1, h, ys.write(t, h)) + ((c, cs.write(t, c)) if is_lstm else ())

    # rank 2 where a caller's states have no static shape (graphs.rewrite): MatMul stays MatMul, not BatchMatMul
    h0, c0 = tf.reshape(h0, [-1, S]), tf.reshape(c0, [-1, H])
    batch = tf.shape(h0)[0]
    known = h0.shape[0]  # the batch, static where known: TensorArray.stack keeps it
    state = (tf.constant(0), h0, tf.TensorArray(tf.float32, size=steps, element_shape=[known, S]))
    if is_lstm:
        state += (c0, tf.TensorArray(tf.float32, size=steps, element_shape=[known, H]))
    last = steps if until is None else tf.minimum(steps, until)
    if U > 1:
        whole = tf.where(batch < UNROLL_BELOW, last // U * U, 0)
        state = tf.while_loop(lambda t, *_: t < whole, block, state)
    # maximum_iterations in the XLA export, as before (XLA needs a bound to differentiate a loop); it adds a counter
    # to every iteration, so only there
    bound = {} if until is None else {"maximum_iterations": steps}
    state = tf.while_loop(lambda t, *_: t < last, single, state, **bound)
    return state[2].stack(), (state[4].stack() if is_lstm else None)


def finish(tf, ys, cs, valid, h0, c0, lengths) -> Tuple["tf.Tensor", "tf.Tensor", "tf.Tensor"]:
    """A loop's every-step states (ys [T, B, S], cs [T, B, H] or None) -> (y [T, B, S] with zeros past each length,
    h [B, S] and c [B, H] at each sequence's last step: h0 / c0 for length 0; c0 itself when cs is None)."""
    steps = tf.shape(ys)[0]
    at = tf.stack([tf.minimum(lengths, steps), tf.range(tf.shape(lengths)[0])], axis=1)  # [B, 2]: (length, b)
    h = tf.gather_nd(tf.concat([h0[None], ys], 0), at)
    c = c0 if cs is None else tf.gather_nd(tf.concat([c0[None], cs], 0), at)
    h.set_shape(h0.shape)  # what a loop carry kept: callers' own loops need the batch size where it is known
    c.set_shape(c0.shape)
    return tf.where(valid, ys, 0.0), h, c
