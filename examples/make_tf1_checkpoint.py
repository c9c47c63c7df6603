"""Write a TF1-style name-based checkpoint like a ``tf.contrib.cudnn_rnn.CudnnLSTM`` training run saved it.

The checkpoint holds ``cudnn_lstm/opaque_kernel`` (a 2-layer bidirectional LSTM, input 32, hidden 48, in cuDNN's
buffer layout), its Adam slots, an embedding feeding it, a dense layer reading it, and the usual counters; it is
written by ``tf.compat.v1.train.Saver`` exactly as TF1 writes one. Weights are seeded random numbers, not a trained
model: the sample exists to exercise conversion.

    python examples/make_tf1_checkpoint.py models/tf1_bilstm/model.ckpt
"""
import argparse
import os

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")


def sample_variables(seed=0, vocab=64, embed=32, hidden=48, layers=2, bidirectional=True):
    """name -> value of the sample model (the cuDNN buffer is built with cudnn_port's layout)."""
    from cudnn_port.layout import RNNSpec, pack, unpack

    rng = np.random.default_rng(seed)
    spec = RNNSpec("lstm", layers, hidden, embed, bidirectional)
    blob = (rng.normal(size=spec.param_count) * 0.3).astype("float32")
    # Adam slots as training leaves them: b_W and b_R get identical gradients, so identical slots.
    slots = []
    for scale in (0.01, 1e-4):
        slot = unpack(spec, np.abs(rng.normal(size=spec.param_count) * scale).astype("float32"))
        for p in slot.layers:
            p.b_R[...] = p.b_W
        slots.append(pack(slot))
    width = spec.num_dirs * hidden
    return {
        "embedding/embeddings": (rng.normal(size=(vocab, embed)) * 0.3).astype("float32"),
        "cudnn_lstm/opaque_kernel": blob,
        "cudnn_lstm/opaque_kernel/Adam": slots[0],
        "cudnn_lstm/opaque_kernel/Adam_1": slots[1],
        "dense/kernel": (rng.normal(size=(width, vocab)) * 0.1).astype("float32"),
        "dense/bias": np.zeros(vocab, "float32"),
        "global_step": np.int64(1200),
        "beta1_power": np.float32(0.9 ** 1200),
        "beta2_power": np.float32(0.999 ** 1200),
    }


def save_tf1(path, variables):
    """Save ``variables`` with a TF1 graph-mode Saver (no var_list: every variable, by name)."""
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        tf_vars = [tf.compat.v1.get_variable(name, initializer=tf.constant(value), use_resource=False)
                   for name, value in variables.items()]
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.variables_initializer(tf_vars))
            return saver.save(sess, path, write_meta_graph=False)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", help="checkpoint prefix to write, e.g. models/tf1_bilstm/model.ckpt")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    os.makedirs(os.path.dirname(os.path.abspath(args.path)), exist_ok=True)
    print(save_tf1(args.path, sample_variables(args.seed)))


if __name__ == "__main__":
    main()
