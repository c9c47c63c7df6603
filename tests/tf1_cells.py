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


def canonical_tensors(canon, prefix) -> dict:
    """What a TF1 ``Saver`` of a ``CudnnLSTM`` / ``CudnnGRU`` wrote beside the buffer (the canonical cell variables
    under the scopes above), written here from the cells' definitions above, not by cudnn_port's TF1 writer: LSTM
    ``kernel`` = ``[x, h]`` rows over column blocks i, j, f, o (cuDNN's i, c, f, o) and ``bias`` = b_W + b_R; GRU
    ``gates/kernel`` over r, u (cuDNN's r, z) with ``gates/bias`` = b_W + b_R, the candidate's input and hidden
    projections from cuDNN's h gate, each with its own bias."""
    spec, out = canon.spec, {}
    for layer, direction, p in canon.pseudo_layers():
        where = scope(prefix, spec.mode, layer, direction, spec.bidirectional)
        W, R, b_W, b_R = (np.asarray(a, np.float64) for a in (p.W, p.R, p.b_W, p.b_R))
        if spec.mode == "lstm":
            order = [0, 2, 1, 3]  # i, j (cuDNN's c), f, o
            out[f"{where}/kernel"] = np.concatenate([np.concatenate([W[g].T, R[g].T], 0) for g in order], 1)
            out[f"{where}/bias"] = np.concatenate([b_W[g] + b_R[g] for g in order])
        else:
            out[f"{where}/gates/kernel"] = np.concatenate([np.concatenate([W[g].T, R[g].T], 0) for g in (0, 1)], 1)
            out[f"{where}/gates/bias"] = np.concatenate([b_W[g] + b_R[g] for g in (0, 1)])
            out[f"{where}/candidate/input_projection/kernel"] = W[2].T
            out[f"{where}/candidate/input_projection/bias"] = b_W[2]
            out[f"{where}/candidate/hidden_projection/kernel"] = R[2].T
            out[f"{where}/candidate/hidden_projection/bias"] = b_R[2]
    return {name: value.astype(np.float32) for name, value in out.items()}
