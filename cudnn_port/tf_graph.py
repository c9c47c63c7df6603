"""cuDNN's RNN forward pass in standard TensorFlow ops (no Cudnn* op), for CPU exports.

Per layer, directions d = 0 (forward) and 1 (backward)::

    X_d     = x for d = 0;  reverse_sequence(x, lengths) for d = 1                            [T, B, I_l]
    XW_d    = X_d @ Wx_d + bx_d     one batched matmul over all steps and directions            [D, T, B, G*H]
    for t in 0 .. T-1:              one loop per direction (SEPARATE_LOOPS), or one for both
        g   = XW[:, t] + h @ Rh     [D', B, S] @ [D', S, G*H], D' = 1 or D                     [D', B, G*H]
        LSTM  i, f, c~, o = σ, σ, tanh, σ of g's blocks;  c' = f*c + i*c~;  h' = o*tanh(c')
        GRU   r, z = σ(g_r), σ(g_z);  h~ = tanh(XW_h + r * (h @ R_h + b_R_h));  h' = (1-z)*h~ + z*h
    y = concat(Y_0, reverse_sequence(Y_1, lengths)) on features, zero past each length           [T, B, D*S]
    final state of direction d = its state after step length-1

The loops do not mask: steps past a length run on (their outputs are zeroed after the loop, and the final
states are read at each length), so a step is the cell's ops, one matrix product and two TensorArray writes.
At batch 1 much of the time goes to running these small ops rather than to the math, so each loop also runs
``STEPS_PER_ITERATION`` steps per iteration, spreading its own per-iteration ops over them. Ops run for the
benchmark BiLSTM (2 layers, hidden 512, 100 steps) at batch 1: 25016 with a masked loop per direction and one
step per iteration, 10368 now, 5226 with ``SEPARATE_LOOPS = False`` (one loop, one batched product for both
directions). Separate loops are the default: on a loaded 2-core CPU the one loop was 1.2-1.5x slower at
batch 32 (probably because each direction's element-wise ops no longer run beside the other's), and not
measurably faster at batch 1.

Weights enter as constants (``numpy`` arrays closed over), so a traced function is frozen by construction. A
CanonicalRNN of TensorFlow tensors (:func:`unpack_tensor` of a params tensor computed in a graph) works too:
that is how a cuDNN node of a saved graph is replaced by CPU ops reading the same params.
"""
import numpy as np

from .canonical import CanonicalRNN, LayerParams, input_bias
from .deps import import_tf


def layer_weights(canon, layer):
    """Both directions of one layer, stacked, as the loops use them: Wx [D, I_l, G*H], Rh [D, S, G*H], bx [D, G*H],
    bh [D, H] and Pt [D, H, P] (None without projection), float32; NumPy arrays for a CanonicalRNN of arrays
    (they become constants: frozen exports), TensorFlow tensors for one of tensors (differentiable).

    Gate blocks stay in cuDNN order. bx is :func:`cudnn_port.canonical.input_bias` (the one bias fold); bh is GRU's
    b_R_h, which sits inside r * (...) and is added there (zeros, unused, for LSTM).
    """
    spec = canon.spec
    G, H, S = spec.num_gates, spec.num_units, spec.state_size
    if isinstance(canon.layers[0].W, np.ndarray):
        reshape, transpose, concat = np.reshape, np.transpose, np.concatenate

        def stack(parts):
            return np.ascontiguousarray(np.stack(parts)).astype(np.float32)
    else:
        tf = import_tf()
        reshape, transpose = tf.reshape, tf.transpose

        def concat(parts):
            return tf.concat(parts, 0)

        def stack(parts):
            return tf.cast(tf.stack(parts), tf.float32)
    Wx, Rh, bx, bh, Pt = [], [], [], [], []
    for direction in range(spec.num_dirs):
        p = canon.layer(layer, direction)
        Wx.append(transpose(reshape(p.W, [G * H, -1])))
        Rh.append(transpose(reshape(p.R, [G * H, S])))
        bx.append(input_bias(spec.mode, p.b_W, p.b_R, concat))
        bh.append(p.b_R[2] if spec.mode == "gru" else p.b_R[0] * 0)
        if spec.num_proj:
            Pt.append(transpose(p.P))
    return stack(Wx), stack(Rh), stack(bx), stack(bh), (stack(Pt) if Pt else None)


def unpack_tensor(spec, params):
    """:func:`cudnn_port.layout.unpack` for a TensorFlow tensor ``params`` [param_count]: a CanonicalRNN of slices
    at the offsets of :meth:`~cudnn_port.layout.RNNSpec.blocks`. The blocks tile the buffer in order, so one
    ``tf.split`` cuts them: its gradient is one concat, where per-block slices would each scatter into a zero
    buffer of the whole size."""
    tf = import_tf()
    blocks = spec.blocks()
    layers = [{} for _ in range(spec.num_pseudo_layers)]
    for block, part in zip(blocks, tf.split(params, [block.size for block in blocks])):
        layers[block.pseudo][block.kind] = tf.reshape(part, block.shape)
    return CanonicalRNN(spec, [LayerParams(**kinds) for kinds in layers])


def stack_forward(canon, inputs, sequence_lengths, initial_h=None, initial_c=None, between=None, until=None):
    """Run the whole stack. inputs [B, T, I] float32, sequence_lengths [B] int32, initial_h [L*D, B, S] and
    initial_c [L*D, B, H] (zeros when None; S = P with a projection, else H). Returns (outputs [B, T, D*S],
    final_h [L*D, B, S], final_c [L*D, B, H] or None).
    ``between(x, layer)`` (e.g. dropout) maps each layer's time-major output before the next layer reads it.
    ``until`` (a scalar, at least max(sequence_lengths)) stops the time loops early, for inputs padded past
    every length; the outputs of the steps skipped are then zeros only under XLA, where an unwritten
    TensorArray entry reads as zeros (plain TensorFlow refuses to stack one)."""
    tf = import_tf()
    spec = canon.spec
    D, is_lstm = spec.num_dirs, spec.mode == "lstm"
    x, lengths, initial_h, initial_c = stack_inputs(spec, inputs, sequence_lengths, initial_h, initial_c)
    steps, batch = tf.shape(x)[0], tf.shape(x)[1]
    valid = valid_steps(lengths, steps)
    # where each direction's state is final: (length - 1, direction, sequence) in the loop's [T, D, B, .] output
    last = tf.stack([tf.tile(tf.maximum(lengths - 1, 0)[None], [D, 1]),
                     tf.tile(tf.range(D)[:, None], [1, batch]), tf.tile(tf.range(batch)[None], [D, 1])], -1)
    started = (lengths > 0)[None, :, None]  # a sequence of length 0 keeps its initial state
    final_h, final_c = [], []
    for layer in range(spec.num_layers):
        Wx, Rh, bx, bh, Pt = layer_weights(canon, layer)
        k = slice(layer * D, (layer + 1) * D)
        xw = _input_projection(tf, x, lengths, Wx, bx, D)
        ys, cs = _directions(tf, xw, initial_h[k], initial_c[k], Rh, bh, is_lstm, until, Pt)
        y = ys[:, 0] if D == 1 else \
            tf.concat([ys[:, 0], tf.reverse_sequence(ys[:, 1], lengths, seq_axis=0, batch_axis=1)], axis=2)
        x = tf.where(valid, y, 0.0)
        final_h.append(tf.where(started, tf.gather_nd(ys, last), initial_h[k]))
        if is_lstm:
            final_c.append(tf.where(started, tf.gather_nd(cs, last), initial_c[k]))
        if between is not None and layer + 1 < spec.num_layers:
            x = between(x, layer)
    outputs = tf.transpose(x, [1, 0, 2])
    return outputs, tf.concat(final_h, 0), (tf.concat(final_c, 0) if is_lstm else None)


def stack_inputs(spec, inputs, sequence_lengths, initial_h=None, initial_c=None):
    """A stack's arguments as its loops read them: (x time-major [T, B, I] float32, lengths [B] int32,
    initial_h [L*D, B, S], initial_c [L*D, B, H]), the states zeros when None."""
    tf = import_tf()
    inputs = tf.convert_to_tensor(inputs, tf.float32)
    batch = tf.shape(inputs)[0]
    initial_h = tf.zeros([spec.num_pseudo_layers, batch, spec.state_size]) if initial_h is None else \
        tf.convert_to_tensor(initial_h, tf.float32)
    initial_c = tf.zeros([spec.num_pseudo_layers, batch, spec.num_units]) if initial_c is None else \
        tf.convert_to_tensor(initial_c, tf.float32)
    return tf.transpose(inputs, [1, 0, 2]), tf.cast(sequence_lengths, tf.int32), initial_h, initial_c


def valid_steps(lengths, steps):
    """[T, B, 1] bool: step t of sequence b is before its length."""
    tf = import_tf()
    return tf.transpose(tf.sequence_mask(lengths, steps))[:, :, None]


def _input_projection(tf, x, lengths, Wx, bx, D):
    """Every direction's input products: x [T, B, I_l], Wx [D, I_l, G*H], bx [D, G*H] -> [D, T, B, G*H], the
    backward direction's on x reversed within each sequence's length (its step t reads x[length - 1 - t]; steps
    past the length read padding, and their outputs are masked after the loop). Reversing x rather than the
    products moves I_l, not G*H, numbers per row."""
    steps, batch = tf.shape(x)[0], tf.shape(x)[1]
    width = x.shape[-1] if x.shape[-1] is not None else tf.shape(x)[-1]
    xs = x[None] if D == 1 else tf.stack([x, tf.reverse_sequence(x, lengths, seq_axis=0, batch_axis=1)])
    xw = tf.matmul(tf.reshape(xs, [D, -1, width]), Wx) + bx[:, None, :]
    return tf.reshape(xw, [D, steps, batch, -1])


def _directions(tf, xw, h0, c0, Rh, bh, is_lstm, until=None, Pt=None):
    """:func:`_time_loop` of each direction in its own loop (:data:`SEPARATE_LOOPS`) or of all in one; same
    shapes."""
    if not SEPARATE_LOOPS or xw.shape[0] == 1:
        return _time_loop(tf, xw, h0, c0, Rh, bh, is_lstm, until, Pt)
    runs = [_time_loop(tf, xw[d:d + 1], h0[d:d + 1], c0[d:d + 1], Rh[d:d + 1], bh[d:d + 1], is_lstm, until,
                       None if Pt is None else Pt[d:d + 1]) for d in range(xw.shape[0])]
    return tf.concat([y for y, _ in runs], 1), (tf.concat([c for _, c in runs], 1) if is_lstm else None)


SEPARATE_LOOPS = True
"""Each direction its own loop (they run side by side on two threads); False: one loop, batched products."""
STEPS_PER_ITERATION = 4
"""Time steps one iteration of the main loop runs (the rest, fewer than this, run one per iteration after it)."""


def _time_loop(tf, xw, h0, c0, Rh, bh, is_lstm, until=None, Pt=None):
    """Every direction of one layer: xw [D, T, B, G*H], h0 [D, B, S], c0 [D, B, H], Rh [D, S, G*H], bh [D, H],
    Pt [D, H, P] or None -> (h after each step [T, D, B, S], c after each step [T, D, B, H] or None).

    Each step is one batched product [D, B, S] @ [D, S, G*H] for the D directions given and one set of
    element-wise ops on [D, B, .]; the loop neither masks nor holds states (steps past a length run on, and the caller masks
    the outputs and reads each final state at its length), which keeps every op out of it that the recurrence
    does not need. A loop iteration costs about as many ops again as a step (the loop's own, per loop
    variable), so the main loop runs :data:`STEPS_PER_ITERATION` steps per iteration, and a second loop the
    remaining ones, one per iteration (a step function, T = 1, runs only that one)."""
    steps = tf.shape(xw)[1]
    last = steps if until is None else tf.minimum(steps, until)
    bh = bh[:, None, :]

    def lstm_step(t, h, c, out_h, out_c):
        g = tf.gather(xw, t, axis=1) + tf.matmul(h, Rh)  # one op; xw[:, t] adds four for its slice bounds
        i, f, cc, o = tf.split(g, 4, axis=-1)
        c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(cc)
        h = tf.sigmoid(o) * tf.tanh(c)
        if Pt is not None:
            h = tf.matmul(h, Pt)
        return h, c, out_h.write(t, h), out_c.write(t, c)

    def gru_step(t, h, c, out_h, out_c):
        # b_R_h goes onto the h block alone: a bias added to the whole product is fused by XLA into the
        # matrix product, which it then runs as a slow loop (GRU 50 ms instead of 19 at batch 1)
        x_r, x_z, x_h = tf.split(tf.gather(xw, t, axis=1), 3, axis=-1)
        h_r, h_z, h_h = tf.split(tf.matmul(h, Rh), 3, axis=-1)
        r, z = tf.sigmoid(x_r + h_r), tf.sigmoid(x_z + h_z)
        h = (1.0 - z) * tf.tanh(x_h + r * (h_h + bh)) + z * h
        return h, c, out_h.write(t, h), out_c

    one = lstm_step if is_lstm else gru_step

    def block(t, h, c, out_h, out_c):
        for k in range(STEPS_PER_ITERATION):
            h, c, out_h, out_c = one(t + k if k else t, h, c, out_h, out_c)
        return (t + STEPS_PER_ITERATION, h, c, out_h, out_c)

    def single(t, h, c, out_h, out_c):
        return (t + 1,) + one(t, h, c, out_h, out_c)

    out_h = tf.TensorArray(tf.float32, size=steps, element_shape=h0.shape)
    out_c = tf.TensorArray(tf.float32, size=steps, element_shape=c0.shape) if is_lstm else tf.zeros([])
    state = (tf.constant(0), h0, c0 if is_lstm else tf.zeros([]), out_h, out_c)
    state = tf.while_loop(lambda t, *_: t + STEPS_PER_ITERATION <= last, block, state,
                          maximum_iterations=steps // STEPS_PER_ITERATION)
    _, _, _, out_h, out_c = tf.while_loop(lambda t, *_: t < last, single, state,
                                          maximum_iterations=STEPS_PER_ITERATION - 1)
    return out_h.stack(), (out_c.stack() if is_lstm else None)


def cudnn_op_cpu(spec, time_major, count, input, input_h, input_c, params, sequence_lengths=None):
    """What a CudnnRNN / V2 / V3 op of ``spec`` returns, in standard ops: [output, output_h, output_c,
    reserve_space, host_reserved][:count]. Time-major: input [T, B, I], states [L*D, B, S or H]; batch-major (V3
    with time_major=False): input [B, T, I], states [B, L*D, S or H] (S = num_proj or H: h is S wide, c H wide).
    No sequence_lengths: every sequence is full length.
    GRU's output_c is zeros like input_c; the reserve outputs are empty (only cuDNN's backward op reads them)."""
    tf = import_tf()
    dtype, is_lstm = input.dtype, spec.mode == "lstm"
    x, h0 = tf.cast(input, tf.float32), tf.cast(input_h, tf.float32)
    c0 = tf.cast(input_c, tf.float32) if is_lstm else None
    if time_major:
        x = tf.transpose(x, [1, 0, 2])
    else:
        h0 = tf.transpose(h0, [1, 0, 2])
        c0 = tf.transpose(c0, [1, 0, 2]) if is_lstm else None
    if sequence_lengths is None:
        sequence_lengths = tf.fill(tf.shape(x)[:1], tf.shape(x)[1])
    out, h, c = stack_forward(unpack_tensor(spec, params), x, sequence_lengths, h0, c0)
    if time_major:
        out = tf.transpose(out, [1, 0, 2])
    else:
        h = tf.transpose(h, [1, 0, 2])
        c = tf.transpose(c, [1, 0, 2]) if is_lstm else None
    c = c if is_lstm else tf.zeros_like(input_c, tf.float32)
    results = [tf.cast(out, dtype), tf.cast(h, dtype), tf.cast(c, dtype), tf.zeros([0], dtype), tf.zeros([0], tf.int8)]
    return results[:count]


def cudnn_forward(spec, params, inputs, sequence_lengths, initial_h, initial_c=None, dropout=0.0, seed=0,
                  training=False):
    """The whole stack as ONE fused ``CudnnRNNV3`` call (needs a GPU to run; any graph can hold it). Same
    interface as :func:`stack_forward`: inputs [B, T, I] (batch-major), sequence_lengths [B], initial_h
    [L*D, B, S] / initial_c [L*D, B, H] -> (outputs [B, T, D*S], final_h [L*D, B, S], final_c or None)."""
    tf = import_tf()
    h0 = tf.transpose(initial_h, [1, 0, 2])  # batch-major ops take states as [B, L*D, H]
    c0 = tf.transpose(initial_c, [1, 0, 2]) if spec.mode == "lstm" else tf.zeros([])
    outputs, h, c, _, _ = tf.raw_ops.CudnnRNNV3(
        input=tf.cast(inputs, "float32"), input_h=h0, input_c=c0, params=params,
        sequence_lengths=tf.cast(sequence_lengths, "int32"), rnn_mode=spec.mode, input_mode="linear_input",
        direction="bidirectional" if spec.bidirectional else "unidirectional", dropout=dropout, seed=seed,
        is_training=training, time_major=False, num_proj=spec.num_proj)
    return outputs, tf.transpose(h, [1, 0, 2]), tf.transpose(c, [1, 0, 2]) if spec.mode == "lstm" else None
