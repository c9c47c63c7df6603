"""An independent judge of the TF1 target: a converted checkpoint read back by name with TensorFlow's checkpoint
reader and run through TF1's cells, written here from their definitions in TensorFlow 1.15, not from cudnn_port
(neither its names, nor its gate orders, nor its reference):

- ``CudnnCompatibleLSTMCell`` is ``LSTMBlockCell(forget_bias=0)``: ``i, j, f, o = split([x, h] @ kernel + bias)``,
  ``c' = sigmoid(f) * c + sigmoid(i) * tanh(j)``, ``h' = sigmoid(o) * tanh(c')``;
- ``CudnnCompatibleGRUCell``: ``r, u = split(sigmoid([x, h] @ gates/kernel + gates/bias))``, ``h~ = tanh(x @
  candidate/input_projection/kernel + its bias + r * (h @ candidate/hidden_projection/kernel + its bias))``,
  ``h' = u * h + (1 - u) * h~``;
- the scopes ``dynamic_rnn`` over a ``MultiRNNCell`` (``rnn/multi_rnn_cell/cell_k``; older graphs without ``rnn/``)
  and ``stack_bidirectional_dynamic_rnn`` (``stack_bidirectional_rnn/cell_k/bidirectional_rnn/fw|bw``) give them.

float64 NumPy over a right-padded batch: a sequence stops at its length, and the backward cell reads it from
length - 1 down to 0 (``reverse_sequence``)."""
import numpy as np

LSTM_VARIABLES = ("kernel", "bias")
GRU_VARIABLES = ("gates/kernel", "gates/bias", "candidate/input_projection/kernel", "candidate/input_projection/bias",
                 "candidate/hidden_projection/kernel", "candidate/hidden_projection/bias")


def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def _lstm_step(v, x, h, c):
    i, j, f, o = np.split(np.concatenate([x, h], 1) @ v["kernel"] + v["bias"], 4, axis=1)
    c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(j)
    return _sigmoid(o) * np.tanh(c), c


def _gru_step(v, x, h, _):
    r, u = np.split(_sigmoid(np.concatenate([x, h], 1) @ v["gates/kernel"] + v["gates/bias"]), 2, axis=1)
    candidate = np.tanh(x @ v["candidate/input_projection/kernel"] + v["candidate/input_projection/bias"]
                        + r * (h @ v["candidate/hidden_projection/kernel"] + v["candidate/hidden_projection/bias"]))
    return u * h + (1 - u) * candidate, None


def scope(prefix, mode, layer, direction, bidirectional, legacy=False) -> str:
    """The TF1 variable scope of the cell of (layer, direction) under ``prefix``."""
    if bidirectional:
        path = f"stack_bidirectional_rnn/cell_{layer}/bidirectional_rnn/{'bw' if direction else 'fw'}"
    else:
        path = f"{'' if legacy else 'rnn/'}multi_rnn_cell/cell_{layer}"
    cell = "cudnn_compatible_lstm_cell" if mode == "lstm" else "cudnn_compatible_gru_cell"
    return "/".join(part for part in (prefix, path, cell) if part)


def tf1_cells(spec, prefix, ckpt_dir, x, lengths, h_0, c_0, legacy=False) -> list:
    """x [B, T, I], lengths [B], h_0 / c_0 [L*D, B, H] (c_0 None for a GRU) through the stack of TF1 cells whose
    variables the checkpoint in ``ckpt_dir`` holds under ``prefix``: [outputs [B, T, D*H], h_n, c_n or None]."""
    import tensorflow as tf

    if spec.num_proj:
        raise NotImplementedError("LSTMCell(num_proj) is not written here")
    reader = tf.train.load_checkpoint(ckpt_dir)
    lstm = spec.mode == "lstm"
    step, names = (_lstm_step, LSTM_VARIABLES) if lstm else (_gru_step, GRU_VARIABLES)
    dirs = 2 if spec.bidirectional else 1
    lengths = np.asarray(lengths)
    rows, steps = np.arange(x.shape[0]), x.shape[1]
    layer_in, h_n, c_n = np.asarray(x, np.float64), [], []
    for layer in range(spec.num_layers):
        outs = []
        for direction in range(dirs):
            where = scope(prefix, spec.mode, layer, direction, spec.bidirectional, legacy)
            v = {n: reader.get_tensor(f"{where}/{n}").astype(np.float64) for n in names}
            h = np.asarray(h_0[layer * dirs + direction], np.float64)
            c = np.asarray(c_0[layer * dirs + direction], np.float64) if lstm else None
            y = np.zeros(x.shape[:2] + h.shape[1:])
            for s in range(steps):
                live = s < lengths
                t = np.clip(lengths - 1 - s if direction else np.full_like(lengths, s), 0, steps - 1)
                h_new, c_new = step(v, layer_in[rows, t], h, c)
                h = np.where(live[:, None], h_new, h)
                c = np.where(live[:, None], c_new, c) if lstm else None
                y[rows[live], t[live]] = h_new[live]
            outs.append(y)
            h_n.append(h)
            c_n.append(c)
        layer_in = np.concatenate(outs, axis=2)
    return [layer_in, np.stack(h_n), np.stack(c_n) if lstm else None]
