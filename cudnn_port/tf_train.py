"""The fused layers' CPU training path: cuDNN's math in TensorFlow ops with a hand-written backward pass.

:func:`stack_train` computes what :func:`cudnn_port.tf_graph.stack_forward` computes (the export path), for
training: per layer and direction the recurrence is one ``tf.custom_gradient`` whose forward loop keeps each step's
gate activations and whose backward loop computes only each step's gate gradients ``dg_t`` and
``dh_{t-1} = dg_t @ R^T`` (plus the state's direct terms), with TensorFlow's own ``SigmoidGrad`` / ``TanhGrad``
kernels; the forward loops' sigmoid is ``1 / (1 + exp(-x))`` (:func:`_sigmoid`) and the LSTM's ``tanh(c)`` is
computed in float64 (:func:`_tanh`). What autodiff of the export
path's loop does on top, and this one does not: write a whole ``[T, B, G*H]`` zero-padded gradient of the step's
input projection at every step (at batches of 8 or more; below, its four-step loop reads rows by a gather), and
accumulate ``dR`` inside the loop. ``dR`` is summed after the loop, two steps per product; the input projection
and its gradients stay one matrix product over all steps. The backward direction loops from T-1 down to 0 over
time-ordered inputs (no reverse_sequence).

On a 2-core CPU (``python bench/bench_training.py --mode both``: 3-layer bidirectional stacks, input 128, hidden
256, 50 steps, batch 32) a training step ran at 2.12-2.24x (LSTM) and 1.54-1.60x (GRU) the speed of Keras' stacked
layers with ``tf.sigmoid`` in the loops (:func:`_sigmoid` adds 1%-6% to a step's CPU time, :func:`_tanh` 5%-6% to an
LSTM's), and at about 2x that of autodiff of the export path's one-step-per-iteration loop. Outputs, states and the
gradients w.r.t. the buffer, the inputs and the initial states equal real cuDNN's as closely as the export path's do
(``tests/test_cudnn_fixtures.py``), and on a 3-layer bidirectional stack of hidden 128 over 60 steps sit within
1.0x-1.5x (RMS) of PyTorch's fp32 error against float64 at both version sets (an AMD EPYC; LSTM outputs 1.23x and
1.46x, the inputs' gradient 1.45x and 1.52x; ``tests/test_tf_train.py``; docs/performance.md, "The training path's
sigmoid"). An LSTM with projection, the plain RNNs (``rnn_tanh`` / ``rnn_relu``) and the cells cuDNN does not
compute (a reset-before GRU, another activation) fall back to autodiff of the export path.
"""
from typing import TYPE_CHECKING, Callable, Optional, Tuple

from .deps import import_tf
from .tf_graph import layer_weights, stack_forward, stack_inputs, valid_steps

if TYPE_CHECKING:
    import tensorflow as tf
    from .canonical import CanonicalRNN


def stack_train(canon: "CanonicalRNN", inputs: "tf.Tensor", sequence_lengths: "tf.Tensor",
                initial_h: "Optional[tf.Tensor]" = None, initial_c: "Optional[tf.Tensor]" = None,
                between: "Optional[Callable[[tf.Tensor, int], tf.Tensor]]" = None
                ) -> Tuple["tf.Tensor", "tf.Tensor", Optional["tf.Tensor"]]:
    """:func:`cudnn_port.tf_graph.stack_forward` with a hand-written backward pass (see the module docstring).
    Same interface and forward math: outputs, states and the gradients w.r.t. inputs and initial states equal
    autodiff of ``stack_forward`` within float32 rounding (its recurrent product is a SparseMatMul below
    ``tf_loop.UNROLL_BELOW`` rows, a MatMul otherwise, summed in another order than this MatMul, and its GRU update
    is written ``h~ + z * (h - h~)``); the buffer's gradient is summed in another order, no less accurately
    (:func:`_sum_over_steps`)."""
    tf = import_tf()
    spec = canon.spec
    if getattr(spec, "num_proj", 0) or spec.is_rnn or not spec.cudnn_computes:  # autodiff of the plain path
        return stack_forward(canon, inputs, sequence_lengths, initial_h, initial_c, between=between)
    D, is_lstm = spec.num_dirs, spec.mode == "lstm"
    G, H, P = spec.num_gates, spec.num_units, spec.num_pseudo_layers
    x, lengths, initial_h, initial_c = stack_inputs(spec, inputs, sequence_lengths, initial_h, initial_c)
    initial_h, initial_c = tf.unstack(initial_h, P), tf.unstack(initial_c, P)
    steps, batch = tf.shape(x)[0], tf.shape(x)[1]
    final_h, final_c = [], []
    for layer in range(spec.num_layers):
        Wx, Rh, bx, bh, _ = layer_weights(canon, layer)  # cuDNN gate order; bx the one bias fold
        width = x.shape[-1] if x.shape[-1] is not None else tf.shape(x)[-1]
        flat = tf.reshape(x, [steps * batch, width])
        outs = []
        for d in range(D):
            xw = tf.reshape(tf.matmul(flat, Wx[d]), [steps, batch, G * H])  # one product over all steps
            k, reverse = layer * D + d, d == 1
            if is_lstm:
                y, h, c = _lstm_direction(tf, xw, bx[d], lengths, initial_h[k], initial_c[k], Rh[d], reverse)
            else:  # b_R_h sits inside r * (...): bh
                (y, h), c = _gru_direction(tf, xw, bx[d], lengths, initial_h[k], Rh[d], bh[d], reverse), None
            outs.append(y)
            final_h.append(h)
            final_c.append(c)
        x = tf.concat(outs, axis=2) if D == 2 else outs[0]
        if between is not None and layer + 1 < spec.num_layers:
            x = between(x, layer)
    outputs = tf.transpose(x, [1, 0, 2])
    return outputs, tf.stack(final_h), (tf.stack(final_c) if is_lstm else None)


def _sigmoid(x):
    """sigmoid(x) = 1 / (1 + exp(-x)), the forward loops' gate activation: 0.43 ulps from the exact value on average
    (2.3 at most), where TensorFlow 2.21's ``tf.sigmoid`` is 0.82 (5.8; 2.16's, 0.38). On a 3-layer bidirectional
    LSTM, hidden 128, 60 steps (``tests/test_tf_train.py``, the realistic-size test) ``tf.sigmoid`` put the outputs
    at 1.41x PyTorch's fp32 error against float64 (RMS) and this form puts them at 1.16x, for 1%-6% more CPU time
    a training step (docs/performance.md, "The training path's sigmoid"). exp(-x) = inf gives 0, as it should; the
    backward pass differentiates with :func:`_sigmoid_grad`, so only the value is this form's."""
    tf = import_tf()
    return 1.0 / (1.0 + tf.exp(-x))


def _tanh(x):
    """tanh(x) computed in float64 and rounded to float32, the LSTM loop's ``tanh(c)`` (forward, and its recomputation
    in the backward loop): with TensorFlow 2.16's float32 ``tf.tanh`` there, the outputs of the realistic-size test
    (``tests/test_tf_train.py``: 3-layer bidirectional LSTM, hidden 128, 60 steps) sat at 2.05x PyTorch's fp32 error
    against float64 (RMS) on an AMD EPYC (1.87x on an Intel Xeon), over the test's 2x bound; with this form 1.46x
    (TensorFlow 2.21: 1.27x -> 1.23x), for 5%-6% more CPU time an LSTM training step. The candidate's tanh stays
    float32: in float64 too it took the outputs to 1.20x for 8%-10% (docs/performance.md). The backward pass
    differentiates with :func:`_tanh_grad`, so only the value is this form's."""
    tf = import_tf()
    return tf.cast(tf.tanh(tf.cast(x, tf.float64)), x.dtype)


def _sigmoid_grad(y, dy):
    """dy * y * (1 - y), d loss / d x for y = sigmoid(x): TensorFlow's own gradient kernel (and rounding)."""
    return import_tf().raw_ops.SigmoidGrad(y=y, dy=dy)


def _tanh_grad(y, dy):
    """dy * (1 - y * y), d loss / d x for y = tanh(x): TensorFlow's own gradient kernel (and rounding)."""
    return import_tf().raw_ops.TanhGrad(y=y, dy=dy)


def _array(tf, steps, shape, value=None):
    array = tf.TensorArray(tf.float32, size=steps, element_shape=shape)
    return array if value is None else array.unstack(value)


def _before(tf, states, first, reverse):
    """The state each step starts from: ``states`` [T, B, H] after each step, ``first`` [B, H] before the first
    step (t = 0 forward, t = T-1 backward)."""
    if reverse:
        return tf.concat([states[1:], first[None]], 0)
    return tf.concat([first[None], states[:-1]], 0)


def _sum_over_steps(tf, a, b):
    """sum over t of a[t]^T @ b[t], for a [T, B, M] and b [T, B, N] -> [M, N] (a recurrent kernel's gradient).

    A loop adding one product per two steps: about the rounding of autodiff's one product per step inside the
    time loop. One product over all T*B rows is no faster and rounds 1.4x worse (RMS, T=50, B=32, H=256). Every
    slice has a fixed size (XLA-compilable)."""
    steps, batch = tf.shape(a)[0], tf.shape(a)[1]
    M, N = a.shape[-1], b.shape[-1]
    pad = [[0, steps % 2], [0, 0], [0, 0]]  # a zero step after an odd count (a no-op pad otherwise)
    pairs = (steps + 1) // 2
    a2 = tf.reshape(tf.pad(a, pad), [pairs, 2 * batch, M])
    b2 = tf.reshape(tf.pad(b, pad), [pairs, 2 * batch, N])

    def add(i, total):
        return i + 1, total + tf.matmul(a2[i], b2[i], transpose_a=True)

    return tf.while_loop(lambda i, _: i < pairs, add, (tf.constant(0), tf.zeros([M, N], a.dtype)))[1]


def _sum_over_batch_and_steps(tf, g):
    """A bias gradient: g [T, B, N] summed over the batch, then over steps (3x less rounding than one sum)."""
    return tf.reduce_sum(tf.reduce_sum(g, 1), 0)


def _lstm_direction(tf, xw, b, lengths, h0, c0, Rh, reverse):
    """One LSTM direction with its gradient. xw [T, B, 4H] (x @ W^T), b [4H] (b_W + b_R), lengths [B], h0 / c0
    [B, H], Rh [H, 4H] -> (y [T, B, H] zero past each length, h, c [B, H]). ``reverse``: t = T-1 .. 0."""
    G4 = Rh.shape[1]
    lengths_col = lengths[:, None]

    @tf.custom_gradient
    def direction(xw, b, h0, c0, Rh):
        steps = tf.shape(xw)[0]
        xs = _array(tf, steps, [None, G4], xw + b)

        def body(n, h, c, hs, acts, cs):
            t = steps - 1 - n if reverse else n
            keep = t < lengths_col  # [B, 1]: steps at or past a length keep the state
            g = xs.read(t) + tf.matmul(h, Rh)
            i, f, _, o = tf.split(_sigmoid(g), 4, axis=-1)  # one sigmoid over all four blocks: fewer ops a step
            cc = tf.tanh(tf.split(g, 4, axis=-1)[2])
            c = tf.where(keep, f * c + i * cc, c)
            h = tf.where(keep, o * _tanh(c), h)
            return n + 1, h, c, hs.write(t, h), acts.write(t, tf.concat([i, f, cc, o], -1)), cs.write(t, c)

        _, h, c, hs, acts, cs = tf.while_loop(
            lambda n, *_: n < steps, body,
            (tf.constant(0), h0, c0, _array(tf, steps, h0.shape), _array(tf, steps, [None, G4]),
             _array(tf, steps, h0.shape)), maximum_iterations=steps)
        states_h, gates, states_c = hs.stack(), acts.stack(), cs.stack()
        valid = valid_steps(lengths, steps)
        y = tf.where(valid, states_h, 0.0)

        def grad(dy, dh, dc):
            dy = tf.zeros_like(y) if dy is None else tf.where(valid, dy, 0.0)
            dh = tf.zeros_like(h) if dh is None else dh
            dc = tf.zeros_like(c) if dc is None else dc
            RhT = tf.transpose(Rh)
            dys, gate_seq = _array(tf, steps, h0.shape, dy), _array(tf, steps, [None, G4], gates)
            c_seq = _array(tf, steps, h0.shape, states_c)
            c_prev_seq = _array(tf, steps, h0.shape, _before(tf, states_c, c0, reverse))

            def back(n, dh, dc, dgs):
                t = n if reverse else steps - 1 - n
                keep = t < lengths_col
                i, f, cc, o = tf.split(gate_seq.read(t), 4, axis=-1)
                tc = _tanh(c_seq.read(t))  # c at a valid step is that step's new c
                dh_t = dys.read(t) + dh
                dc_t = dc + _tanh_grad(tc, dh_t * o)
                dg = tf.concat([_sigmoid_grad(i, dc_t * cc), _sigmoid_grad(f, dc_t * c_prev_seq.read(t)),
                                _tanh_grad(cc, dc_t * i), _sigmoid_grad(o, dh_t * tc)], -1)
                dg = tf.where(keep, dg, 0.0)
                return (n + 1, tf.where(keep, tf.matmul(dg, RhT), dh), tf.where(keep, dc_t * f, dc),
                        dgs.write(t, dg))

            _, dh0, dc0, dgs = tf.while_loop(lambda n, *_: n < steps, back,
                                             (tf.constant(0), dh, dc, _array(tf, steps, [None, G4])),
                                             maximum_iterations=steps)
            dg = dgs.stack()
            dRh = _sum_over_steps(tf, _before(tf, states_h, h0, reverse), dg)
            return dg, _sum_over_batch_and_steps(tf, dg), dh0, dc0, dRh

        return (y, h, c), grad

    return direction(xw, b, h0, c0, Rh)


def _gru_direction(tf, xw, b, lengths, h0, Rh, bh, reverse):
    """One GRU direction (reset-after) with its gradient. xw [T, B, 3H] (x @ W^T), b [3H] (b_W + b_R for r and z,
    b_W for h), lengths [B], h0 [B, H], Rh [H, 3H], bh [H] (b_R_h) -> (y [T, B, H] zero past each length, h)."""
    H, G3 = Rh.shape[0], Rh.shape[1]
    lengths_col = lengths[:, None]

    @tf.custom_gradient
    def direction(xw, b, h0, Rh, bh):
        steps = tf.shape(xw)[0]
        xs = _array(tf, steps, [None, G3], xw + b)

        def body(n, h, hs, saved):
            t = steps - 1 - n if reverse else n
            keep = t < lengths_col
            hr = tf.matmul(h, Rh)
            x_r, x_z, x_h = tf.split(xs.read(t), 3, axis=-1)
            hh = hr[:, 2 * H:] + bh  # R_h h + b_R_h, on the h block alone
            r, z = _sigmoid(x_r + hr[:, :H]), _sigmoid(x_z + hr[:, H:2 * H])
            cand = tf.tanh(x_h + r * hh)
            h = tf.where(keep, (1.0 - z) * cand + z * h, h)
            return n + 1, h, hs.write(t, h), saved.write(t, tf.concat([r, z, cand, hh], -1))

        _, h, hs, saved = tf.while_loop(
            lambda n, *_: n < steps, body,
            (tf.constant(0), h0, _array(tf, steps, h0.shape), _array(tf, steps, [None, 4 * H])),
            maximum_iterations=steps)
        states_h, acts = hs.stack(), saved.stack()
        valid = valid_steps(lengths, steps)
        y = tf.where(valid, states_h, 0.0)

        def grad(dy, dh):
            dy = tf.zeros_like(y) if dy is None else tf.where(valid, dy, 0.0)
            dh = tf.zeros_like(h) if dh is None else dh
            RhT = tf.transpose(Rh)
            h_prev = _before(tf, states_h, h0, reverse)
            dys, act_seq = _array(tf, steps, h0.shape, dy), _array(tf, steps, [None, 4 * H], acts)
            h_prev_seq = _array(tf, steps, h0.shape, h_prev)

            def back(n, dh, dxs, dhrs):
                t = n if reverse else steps - 1 - n
                keep = t < lengths_col
                r, z, cand, hh = tf.split(act_seq.read(t), 4, axis=-1)
                dh_t = dys.read(t) + dh
                d_h = _tanh_grad(cand, dh_t * (1.0 - z))  # d pre-activation of h~
                d_r = _sigmoid_grad(r, d_h * hh)
                d_z = _sigmoid_grad(z, dh_t * h_prev_seq.read(t) - dh_t * cand)
                dx = tf.where(keep, tf.concat([d_r, d_z, d_h], -1), 0.0)  # d xw_t
                dhr = tf.where(keep, tf.concat([d_r, d_z, d_h * r], -1), 0.0)  # d (h @ Rh), b_R_h with it
                dh = tf.where(keep, tf.matmul(dhr, RhT) + dh_t * z, dh)
                return n + 1, dh, dxs.write(t, dx), dhrs.write(t, dhr)

            _, dh0, dxs, dhrs = tf.while_loop(
                lambda n, *_: n < steps, back,
                (tf.constant(0), dh, _array(tf, steps, [None, G3]), _array(tf, steps, [None, G3])),
                maximum_iterations=steps)
            dx, dhr = dxs.stack(), dhrs.stack()
            dbh = _sum_over_batch_and_steps(tf, dhr)[2 * H:]
            return dx, _sum_over_batch_and_steps(tf, dx), dh0, _sum_over_steps(tf, h_prev, dhr), dbh

        return (y, h), grad

    return direction(xw, b, h0, Rh, bh)
