"""The TF1 flow: a name-based checkpoint holding ``cudnn_lstm/opaque_kernel`` (what ``tf.contrib.cudnn_rnn``
training wrote) -> ``cudnn-port convert`` -> restored by name into CPU cells, in a TF1-style graph.

    python examples/tf1_flow.py --out out/tf1_flow

The CPU graph below is what a TF1 inference graph does, written from the TF1 cell definitions (not from
cudnn_port): variables created under the names ``CudnnCompatibleLSTMCell`` / ``CudnnCompatibleGRUCell`` use
(conventions §4), restored with ``tf.compat.v1.train.Saver``, run with ``BlockLSTM`` (the kernel of
``LSTMBlockFusedCell``, ``forget_bias=0``, gates i, c, f, o) or the GRU cell's matmuls, over right-padded batches
like ``dynamic_rnn`` / ``stack_bidirectional_dynamic_rnn``. Its outputs are compared with the NumPy reference of
cuDNN's math on the original buffer.
"""
import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import numpy as np  # noqa: E402


def tf1_scope(prefix, mode, bidirectional, layer, direction, legacy=False):
    """The variable scope TF1 graphs give cell (layer, direction) of a cuDNN stack under ``prefix``."""
    cell = "cudnn_compatible_lstm_cell" if mode == "lstm" else "cudnn_compatible_gru_cell"
    if bidirectional:
        return f"{prefix}/stack_bidirectional_rnn/cell_{layer}/bidirectional_rnn/{'bw' if direction else 'fw'}/{cell}"
    return f"{prefix}/{'' if legacy else 'rnn/'}multi_rnn_cell/cell_{layer}/{cell}"


def tf1_graph_forward(spec, prefix, ckpt_dir, x, lengths, h_0, c_0, legacy=False):
    """Restore TF1 cell variables by name and run them like dynamic_rnn / stack_bidirectional_dynamic_rnn
    (``legacy``: under the older ``{prefix}/multi_rnn_cell/…`` names). x [B, T, I] right-padded, lengths [B],
    h_0 / c_0 [L*D, B, H]. Returns [outputs [B, T, D*H], h_n [L*D, B, H], c_n or None]."""
    import tensorflow as tf

    H, D = spec.num_units, spec.num_dirs
    graph = tf.Graph()
    with graph.as_default():
        v1 = tf.compat.v1
        seq = tf.transpose(tf.constant(x), [1, 0, 2])  # time-major [T, B, I]
        lens = tf.constant(lengths.astype(np.int64))
        valid = tf.sequence_mask(lens, x.shape[1], dtype=tf.float32)  # [B, T]
        valid_tm = tf.transpose(valid)[:, :, None]
        restore, h_list, c_list = [], [], []
        layer_in = seq
        for layer in range(spec.num_layers):
            outs = []
            for direction in range(D):
                p = layer * D + direction
                scope = tf1_scope(prefix, spec.mode, spec.bidirectional, layer, direction, legacy)
                width = spec.layer_input_size(layer)
                inp = tf.reverse_sequence(layer_in, lens, seq_axis=0, batch_axis=1) if direction else layer_in
                h0, c0 = tf.constant(h_0[p]), tf.constant(c_0[p])
                if spec.mode == "lstm":
                    kernel = v1.get_variable(f"{scope}/kernel", [width + H, 4 * H], use_resource=False)
                    bias = v1.get_variable(f"{scope}/bias", [4 * H], use_resource=False)
                    restore += [kernel, bias]
                    zeros = tf.zeros([H])
                    _, cs, _, _, _, _, h = tf.raw_ops.BlockLSTM(
                        seq_len_max=tf.constant(x.shape[1], tf.int64), x=inp, cs_prev=c0, h_prev=h0, w=kernel,
                        wci=zeros, wcf=zeros, wco=zeros, b=bias, forget_bias=0.0, cell_clip=-1.0, use_peephole=False)
                else:
                    names = ["gates/kernel", "gates/bias", "candidate/input_projection/kernel",
                             "candidate/input_projection/bias", "candidate/hidden_projection/kernel",
                             "candidate/hidden_projection/bias"]
                    shapes = [[width + H, 2 * H], [2 * H], [width, H], [H], [H, H], [H]]
                    gk, gb, ik, ib, hk, hb = [v1.get_variable(f"{scope}/{n}", s, use_resource=False)
                                              for n, s in zip(names, shapes)]
                    restore += [gk, gb, ik, ib, hk, hb]
                    steps, state = [], h0
                    inp_valid = tf.reverse_sequence(valid_tm, lens, seq_axis=0, batch_axis=1) if direction else valid_tm
                    for t in range(x.shape[1]):
                        xt = inp[t]
                        gates = tf.sigmoid(tf.matmul(tf.concat([xt, state], 1), gk) + gb)
                        r, u = tf.split(gates, 2, axis=1)
                        cand = tf.tanh(tf.matmul(xt, ik) + ib + r * (tf.matmul(state, hk) + hb))
                        new = u * state + (1 - u) * cand
                        state = inp_valid[t] * new + (1 - inp_valid[t]) * state
                        steps.append(state)
                    h, cs = tf.stack(steps), None
                # Final state: the state at step length-1 of this (possibly reversed) sequence.
                last = tf.stack([tf.clip_by_value(lens - 1, 0, x.shape[1]), tf.range(x.shape[0], dtype=tf.int64)], 1)
                h_list.append(tf.gather_nd(h, last))
                if cs is not None:
                    c_list.append(tf.gather_nd(cs, last))
                if direction:
                    h = tf.reverse_sequence(h, lens, seq_axis=0, batch_axis=1)
                outs.append(h * valid_tm)
            layer_in = tf.concat(outs, axis=2)
        outputs = tf.transpose(layer_in, [1, 0, 2])
        saver = v1.train.Saver(var_list=restore)
        with v1.Session(graph=graph) as sess:
            saver.restore(sess, tf.train.latest_checkpoint(ckpt_dir))
            fetched = sess.run([outputs, tf.stack(h_list)] + ([tf.stack(c_list)] if c_list else []))
    return fetched + ([None] if not c_list else [])



def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="out/tf1_flow")
    args = parser.parse_args(argv)

    from make_tf1_checkpoint import sample_variables, save_tf1

    from cudnn_port import RNNSpec, convert, reference, unpack

    variables = sample_variables(seed=5)
    os.makedirs(os.path.join(args.out, "train"), exist_ok=True)
    source = save_tf1(os.path.join(args.out, "train", "model.ckpt"), variables)
    manifest = convert(source, os.path.join(args.out, "converted"), force=True)
    spec = RNNSpec(**manifest["stacks"][0]["spec"])
    print(f"converted {manifest['stacks'][0]['variable']}: {spec.describe()} ({manifest['stacks'][0]['spec_source']})")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 6, spec.input_size)).astype("float32")
    lengths = np.array([6, 2, 4], np.int32)
    x[np.arange(6)[None, :] >= lengths[:, None]] = 0
    shape = (spec.num_pseudo_layers, 3, spec.num_units)
    h_0, c_0 = np.zeros(shape, "float32"), np.zeros(shape, "float32")
    got = tf1_graph_forward(spec, "cudnn_lstm", os.path.join(args.out, "converted", "checkpoint"), x, lengths, h_0, c_0)
    want = reference.forward(unpack(spec, variables["cudnn_lstm/opaque_kernel"]), x, lengths, h_0, c_0)
    errors = [float(np.max(np.abs(g - w))) for g, w in zip(got, want) if w is not None]
    print(f"TF1 CPU cells vs cuDNN's math: max abs error {max(errors):.2e} (outputs, h_n, c_n)")
    return 0 if max(errors) <= 1e-5 else 1


if __name__ == "__main__":
    raise SystemExit(main())
