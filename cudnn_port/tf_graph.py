"""cuDNN's RNN forward pass in standard TensorFlow ops (no Cudnn* op), for CPU exports.

Per layer and direction d (each direction its own loops, so the two can run side by side)::

    X_d     = x for d = 0;  x reversed within each length for d = 1                [T, B, I_l]
    XW_d    = X_d @ Wx_d + bx_d        one matmul over all steps                    [T, B, G*H]
    for t in 0 .. T-1:                 :func:`cudnn_port.tf_loop.time_loop` (the cell, and why it is so written)
        LSTM  i, f, c~, o = σ, σ, tanh, σ of the blocks of XW_d[t] + h @ Rh_d (cuDNN's gate order; one σ over
              all four blocks);  c' = f*c + i*c~;  h' = o*tanh(c')
        GRU   r, z = σ(g_r), σ(g_z);  h~ = tanh(XW_h + r * (h @ R_h + b_R_h));  h' = (1-z)*h~ + z*h
              (reset before: h~ = tanh(XW_h + (r * h) @ R_h), b_R_h in XW_h's bias)
        RNN   h' = act(XW_d[t] + h @ Rh_d)     act = tanh (rnn_tanh) or relu (rnn_relu)
    Y_d = each step's h, zeros at t >= length (one select after the loop)
    final h (and c) = the state after step length - 1, gathered after the loop (h0 / c0 for length 0)
    y = concat(Y_0, Y_1 reversed within each length) on features                  [T, B, D*H]

One loop per direction rather than one over both, so the two directions' loops run on two threads at once. Both
directions' input products start together, and so do both loops (:func:`_together`): a loop started early slows what
the other direction still runs on TensorFlow's intra-op threads. The cell and its product:
:mod:`cudnn_port.tf_loop`; the runtime facts these choices rely on: docs/conventions.md, section 8; their
measurements: docs/performance.md ("The loop", ``python bench/bench_exports.py --only saved_model``).

Without sequence lengths (every sequence full length: a layer without a mask in a whole-model export) the loops'
last states are the final ones, so nothing is zeroed or gathered after them and no loop writes every step's c; and
with ``block_lstm`` (the whole-model export's trace) an LSTM of Keras' functions up to
:data:`~cudnn_port.tf_block_lstm.BLOCK_LSTM_UNITS` units runs, for batches below ``tf_loop.UNROLL_BELOW``, as
TensorFlow's fused ``BlockLSTMV2`` (one op per direction, no per-step ops; :mod:`cudnn_port.tf_block_lstm`), chosen
in the graph by a ``tf.cond`` on the batch: the loops' per-step ops cost more than the whole product at batch 1 on
such widths, and less than BlockLSTMV2's per-step input product at batch 32 (measurements:
docs/performance.md, "The loop").

The input products are ``MatMul``. ``SparseMatMul``, the loop's product at small batches, is no faster here (0.98x
the time of the benchmark stacks at batch 1, oneDNN off) and slower under oneDNN at the second layer's width (both
directions' ``[100, 1024] @ [1024, 2048]``: 6.66 ms against 5.17 ms for ``MatMul``).

Weights enter as constants (``numpy`` arrays closed over), so a traced function is frozen by construction. A
CanonicalRNN of TensorFlow tensors (:func:`unpack_tensor` of a params tensor computed in a graph) works too:
that is how a cuDNN node of a saved graph is replaced by CPU ops reading the same params.
"""
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .canonical import CanonicalRNN, LayerParams, input_bias
from .deps import import_tf
from .tf_block_lstm import block_lstm_fits, block_lstm_layer
from .tf_loop import UNROLL_BELOW, finish, time_loop

if TYPE_CHECKING:
    import tensorflow as tf
    from .layout import RNNSpec


def layer_weights(canon: CanonicalRNN, layer: int) -> Tuple[Any, Any, Any, Any, Optional[Any]]:
    """Both directions of one layer, stacked: Wx [D, I_l, G*H], Rh [D, S, G*H], bx [D, G*H], bh [D, H] and
    Pt [D, H, P] (None without projection), float32; NumPy arrays for a CanonicalRNN of arrays (they become
    constants: frozen exports), TensorFlow tensors for one of tensors (differentiable).

    Gate blocks stay in cuDNN order, as the loops read them: the fused layers read their weights from the buffer in
    every call, and reordering the LSTM's gates would copy all of them once more in each call (the fused 2-layer
    LSTM, hidden 512, took 1.07-1.26x the time at batch 1 that way; docs/performance.md). bx is
    :func:`cudnn_port.canonical.input_bias` (the one bias fold); bh is GRU's b_R_h, which sits inside r * (...) and is
    added there (zeros, unused, for LSTM).
    """
    spec = canon.spec
    G, H, S = spec.num_gates, spec.num_units, spec.state_size
    concat: Callable[[Sequence[Any]], Any]
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
        bx.append(input_bias(spec.mode, p.b_W, p.b_R, concat, spec.reset_after))
        bh.append(p.b_R[2] if spec.mode == "gru" and spec.reset_after else p.b_R[0] * 0)
        if p.P is not None:  # with a projection (spec.num_proj) only
            Pt.append(transpose(p.P))
    return stack(Wx), stack(Rh), stack(bx), stack(bh), (stack(Pt) if Pt else None)


def unpack_tensor(spec: "RNNSpec", params: "tf.Tensor") -> CanonicalRNN:
    """:func:`cudnn_port.layout.unpack` for a TensorFlow tensor ``params`` [param_count]: a CanonicalRNN of slices
    at the offsets of :meth:`~cudnn_port.layout.RNNSpec.blocks`. The blocks tile the buffer in order, so one
    ``tf.split`` cuts them: its gradient is one concat, where per-block slices would each scatter into a zero
    buffer of the whole size."""
    tf = import_tf()
    blocks = spec.blocks()
    layers: List[Dict[str, Any]] = [{} for _ in range(spec.num_pseudo_layers)]
    for block, part in zip(blocks, tf.split(params, [block.size for block in blocks])):
        layers[block.pseudo][block.kind] = tf.reshape(part, block.shape)
    return CanonicalRNN(spec, [LayerParams(**kinds) for kinds in layers])


def stack_forward(canon: CanonicalRNN, inputs: "tf.Tensor", sequence_lengths: "tf.Tensor",
                  initial_h: "Optional[tf.Tensor]" = None, initial_c: "Optional[tf.Tensor]" = None,
                  between: "Optional[Callable[[tf.Tensor, int], tf.Tensor]]" = None,
                  until: "Optional[tf.Tensor]" = None, block_lstm: bool = False
                  ) -> Tuple["tf.Tensor", "tf.Tensor", Optional["tf.Tensor"]]:
    """Run the whole stack. inputs [B, T, I] float32, sequence_lengths [B] int32 (None: every sequence is full
    length, which spares the loops' written cs and what zeroes and gathers after them), initial_h [L*D, B, S] and
    initial_c [L*D, B, H] (zeros when None; S = P with a projection, else H). Returns (outputs [B, T, D*S],
    final_h [L*D, B, S], final_c [L*D, B, H] or None).
    ``between(x, layer)`` (e.g. dropout) maps each layer's time-major output before the next layer reads it.
    ``until`` (a scalar, at least max(sequence_lengths)) stops the time loops early, for inputs padded past
    every length (the XLA export's: its loops then run one step per iteration, see :mod:`cudnn_port.tf_loop`); the
    outputs of the steps skipped are then zeros only under XLA, where an unwritten TensorArray entry reads as zeros
    (plain TensorFlow refuses to stack one).
    ``block_lstm`` (with no ``sequence_lengths``): each layer of an LSTM that :func:`block_lstm_fits` runs as
    TensorFlow's fused ``BlockLSTMV2`` for batches below ``tf_loop.UNROLL_BELOW``, chosen in the graph
    (:mod:`cudnn_port.tf_block_lstm`); that op has no XLA kernel, so only for graphs that XLA does not compile."""
    tf = import_tf()
    spec = canon.spec
    D, is_lstm = spec.num_dirs, spec.mode == "lstm"
    full = sequence_lengths is None  # every sequence full length: nothing to zero, the loops' last states are final
    if full and until is not None:
        raise ValueError("until stops the loops at the longest of sequence_lengths; pass them")
    x, lengths, initial_h, initial_c = stack_inputs(spec, inputs, sequence_lengths, initial_h, initial_c)
    steps, batch = tf.shape(x)[0], tf.shape(x)[1]
    valid = None if full else valid_steps(lengths, steps)
    if D == 1:
        reverse = None
    elif full:
        def reverse(v):
            return tf.reverse(v, [0])
    else:
        reverse = _time_reversal(tf, lengths, steps, batch)
    blocks = block_lstm and full and until is None and block_lstm_fits(spec) and x.shape[0] != 0
    final_h, final_c = [], []
    for layer in range(spec.num_layers):
        Wx, Rh, bx, bh, Pt = layer_weights(canon, layer)
        x_d = _together(tf, [x, reverse(x)]) if D == 2 else [x]
        h0s = [initial_h[layer * D + d] for d in range(D)]
        c0s = [initial_c[layer * D + d] for d in range(D)]

        def loops(x_d=x_d, Wx=Wx, Rh=Rh, bx=bx, bh=bh, Pt=Pt, h0s=h0s, c0s=c0s, outer=(steps, batch)):
            width = x.shape[-1] if x.shape[-1] is not None else tf.shape(x)[-1]
            if blocks:  # in a branch, where the outer shape tensors are captured: static where x_d's shape is
                steps, batch = tf.shape(x_d[0])[0], tf.shape(x_d[0])[1]
            else:
                steps, batch = outer
            xws = _together(tf, [tf.nn.bias_add(tf.matmul(tf.reshape(x_d[d], [-1, width]), Wx[d]), bx[d])
                                 for d in range(D)])
            runs = []
            for d in range(D):
                xw = tf.reshape(xws[d], [steps, batch, int(Wx.shape[-1])])
                runs.append(time_loop(tf, xw, h0s[d], c0s[d], Rh[d], bh[d], spec.mode, until,
                                      None if Pt is None else Pt[d], reset_after=spec.reset_after,
                                      activation=spec.activation, recurrent_activation=spec.recurrent_activation,
                                      every_c=not full, small=not blocks))
            results = []
            for d, (ys, cs, h, c) in enumerate(_together(tf, runs)):
                if full:  # no copy of every step's states, no select, no gather: 5-8% of the time at batch 32
                    results.append((ys, h, c))
                else:
                    results.append(finish(tf, ys, cs, valid, h0s[d], c0s[d], lengths))
            return results

        if blocks:  # the stacked weights outside the branch, where a frozen graph's constants fold once
            stacked = [_concat(tf, [Wx[d], Rh[d]]) for d in range(D)]
            results = tf.cond(tf.logical_and(batch < UNROLL_BELOW, steps > 0),
                              lambda: block_lstm_layer(tf, x_d, stacked, bx, h0s, c0s), loops)
        else:
            results = loops()
        outs = []
        for d, (y, h, c) in enumerate(results):
            h.set_shape(h0s[d].shape)
            c.set_shape(c0s[d].shape)
            outs.append(y if d == 0 else reverse(y))
            final_h.append(h)
            final_c.append(c)
        x = tf.concat(outs, axis=2)
        if between is not None and layer + 1 < spec.num_layers:
            x = between(x, layer)
    outputs = tf.transpose(x, [1, 0, 2])
    return outputs, tf.stack(final_h), (tf.stack(final_c) if is_lstm else None)


def _concat(tf, parts):
    return np.concatenate(parts) if isinstance(parts[0], np.ndarray) else tf.concat(parts, 0)


def _together(tf, parts):
    """``parts`` (tensors, or tuples of tensors and None) unchanged, each made to wait for all of them. The two
    directions' input products then start together, once the backward direction's reversed input is ready; their
    loops start together, once both products are done; and what follows the loops starts once both have ended.
    Otherwise whichever starts first takes a core from what the other direction still runs split across
    TensorFlow's intra-op threads, and that waits for it: at batch 1 (hidden 512), a bias add of 0.1 ms took 1-4.5
    ms and the input's reversal 0.7 ms, and the second loop started that much later.

    The wait is a data dependency, one ``IdentityN`` over every tensor, not control inputs: TensorFlow.js reads a
    node's control inputs as data inputs, and once ``tensorflowjs_converter``'s graph optimizer moved an Identity's
    control inputs onto the ``ConcatV2`` reading it, TensorFlow.js took the last of them for the axis."""
    if len(parts) < 2:
        return parts
    flat = [t for part in parts for t in (part if isinstance(part, tuple) else (part,)) if t is not None]
    out = iter(tf.identity_n(flat))
    return [tuple(None if t is None else next(out) for t in part) if isinstance(part, tuple) else next(out)
            for part in parts]


def _time_reversal(tf, lengths, steps, batch):
    """A function reversing [T, B, F] tensors in time within each sequence's length (steps past it stay), as
    ``tf.reverse_sequence(v, lengths, seq_axis=0, batch_axis=1)`` does, by one gather of rows at indices computed
    once per stack. Timed alone on 100 steps at batch 32, reverse_sequence took 4.0 ms (512 features) and 5.9 ms
    (1024), the gather 1.1 and 1.8 ms; at batch 1, 0.47-0.71 ms against 0.43-0.46 ms, a call's overhead included."""
    t = tf.range(steps)[:, None]
    length = tf.minimum(lengths, steps)[None, :]
    source = tf.where(t < length, length - 1 - t, t) * batch + tf.range(batch)[None, :]  # [T, B] -> row index
    rows = tf.reshape(source, [-1])

    def reverse(v):
        return tf.reshape(tf.gather(tf.reshape(v, [steps * batch, -1]), rows), tf.shape(v))
    return reverse


def stack_inputs(spec: "RNNSpec", inputs: "tf.Tensor", sequence_lengths: "tf.Tensor",
                 initial_h: "Optional[tf.Tensor]" = None,
                 initial_c: "Optional[tf.Tensor]" = None
                 ) -> Tuple["tf.Tensor", Optional["tf.Tensor"], "tf.Tensor", "tf.Tensor"]:
    """A stack's arguments as its loops read them: (x time-major [T, B, I] float32, lengths [B] int32 (None for
    None: every sequence full length), initial_h [L*D, B, S], initial_c [L*D, B, H]), the states zeros when None."""
    tf = import_tf()
    inputs = tf.convert_to_tensor(inputs, tf.float32)
    batch = tf.shape(inputs)[0]
    initial_h = tf.zeros([spec.num_pseudo_layers, batch, spec.state_size]) if initial_h is None else \
        tf.convert_to_tensor(initial_h, tf.float32)
    initial_c = tf.zeros([spec.num_pseudo_layers, batch, spec.num_units]) if initial_c is None else \
        tf.convert_to_tensor(initial_c, tf.float32)
    lengths = None if sequence_lengths is None else tf.cast(sequence_lengths, tf.int32)
    return tf.transpose(inputs, [1, 0, 2]), lengths, initial_h, initial_c


def valid_steps(lengths: "tf.Tensor", steps: "tf.Tensor") -> "tf.Tensor":
    """[T, B, 1] bool: step t of sequence b is before its length."""
    tf = import_tf()
    return tf.transpose(tf.sequence_mask(lengths, steps))[:, :, None]


def cudnn_op_cpu(spec: "RNNSpec", time_major: bool, count: int, input: "tf.Tensor", input_h: "tf.Tensor",
                 input_c: "Optional[tf.Tensor]", params: "tf.Tensor",
                 sequence_lengths: "Optional[tf.Tensor]" = None) -> List["tf.Tensor"]:
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
    out, h, c = stack_forward(unpack_tensor(spec, params), x, sequence_lengths, h0, c0)
    if time_major:
        out = tf.transpose(out, [1, 0, 2])
    else:
        h = tf.transpose(h, [1, 0, 2])
        c = tf.transpose(c, [1, 0, 2]) if is_lstm else None
    c = c if is_lstm else tf.zeros_like(input_c, tf.float32)
    results = [tf.cast(out, dtype), tf.cast(h, dtype), tf.cast(c, dtype), tf.zeros([0], dtype), tf.zeros([0], tf.int8)]
    return results[:count]


def cudnn_forward(spec: "RNNSpec", params: "tf.Tensor", inputs: "tf.Tensor", sequence_lengths: "tf.Tensor",
                  initial_h: "tf.Tensor", initial_c: "Optional[tf.Tensor]" = None, dropout: float = 0.0,
                  seed: int = 0, training: bool = False) -> Tuple["tf.Tensor", "tf.Tensor", Optional["tf.Tensor"]]:
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
