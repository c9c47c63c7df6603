"""TensorFlow's fused CPU LSTM, ``BlockLSTMV2``, as one layer of a stack: which specs it computes
(:func:`block_lstm_fits`) and each direction of a layer run by it (:func:`block_lstm_layer`). The whole sequence runs
in one kernel, with no per-step ops; :func:`cudnn_port.tf_graph.stack_forward` chooses it, in the graph, for the small
batches of a whole-model export's trace (``block_lstm``; why, and the measurements: that module's docstring).
"""
from typing import TYPE_CHECKING, Any, List, Sequence, Tuple

if TYPE_CHECKING:
    from .layout import RNNSpec

BLOCK_LSTM_UNITS = 256
"""The widest LSTM :func:`block_lstm_layer` runs: with it the whole-model SavedModels of ``python
bench/bench_stock_keras.py --speed`` took 0.42x (LSTM(128) seq2seq) and 0.82x (LSTM(256) x2) their former time at
batch 1; on the stack road's 512-unit BiLSTM BlockLSTMV2 took 1.82x the loop's (docs/performance.md)."""


def block_lstm_fits(spec: "RNNSpec") -> bool:
    """Whether BlockLSTMV2 computes ``spec``'s cell: an LSTM of Keras' functions (sigmoid gates, tanh), no projection,
    at most BLOCK_LSTM_UNITS units."""
    return (spec.mode == "lstm" and not spec.num_proj and spec.activation in (None, "tanh")
            and spec.recurrent_activation == "sigmoid" and spec.num_units <= BLOCK_LSTM_UNITS)


def block_lstm_layer(tf: Any, x_d: Sequence[Any], stacked: Sequence[Any], bx: Any, h0s: Sequence[Any],
                     c0s: Sequence[Any]) -> List[Tuple[Any, Any, Any]]:
    """Each direction of one layer as one ``BlockLSTMV2`` (TensorFlow's fused CPU LSTM: the whole sequence in one
    kernel, no per-step ops), every sequence full length and at least one step: [(y [T, B, H], h, c)]. ``tf``: the
    TensorFlow module; x_d: each direction's time-major input [T, B, I]; h0s, c0s: its states [B, H]. Its gates are
    cuDNN's order (i, f, c~, o), its weight [I + H, 4H] the input and recurrent matrices ``stacked``, its bias ``bx``
    [D, 4H] the fold of both biases; no peepholes, no clipping (cell_clip 0)."""
    results = []
    for d, (x, h0, c0) in enumerate(zip(x_d, h0s, c0s)):
        w = stacked[d]
        peep = tf.zeros([int(w.shape[-1]) // 4])
        out = tf.raw_ops.BlockLSTMV2(seq_len_max=tf.cast(tf.shape(x)[0], tf.int64), x=x, cs_prev=c0, h_prev=h0,
                                     w=w, wci=peep, wcf=peep, wco=peep, b=bx[d], cell_clip=0.0, use_peephole=False)
        ys, cs = out[6], out[1]
        results.append((ys, ys[-1], cs[-1]))
    return results
