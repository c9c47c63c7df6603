"""The TF1 flow: a name-based checkpoint holding ``cudnn_lstm/opaque_kernel`` (what ``tf.contrib.cudnn_rnn``
training wrote) -> ``cudnn-port convert`` -> restored by name into CPU cells, in a TF1-style graph.

    python examples/tf1_flow.py --out out/tf1_flow

The CPU graph is what a TF1 inference graph does (:func:`cudnn_port.judging.stock.tf1_cells`, written from the TF1 cell
definitions, sharing no code with the converter): variables created under the names ``CudnnCompatibleLSTMCell``
/ ``CudnnCompatibleGRUCell`` use (docs/conventions.md, section 4), restored with ``tf.compat.v1.train.Saver``,
run with ``BlockLSTM`` (the kernel of ``LSTMBlockFusedCell``, ``forget_bias=0``, gates i, c, f, o) or the GRU
cell's matmuls, over right-padded batches like ``dynamic_rnn`` / ``stack_bidirectional_dynamic_rnn``. Its outputs
are compared with the NumPy reference of cuDNN's math on the original buffer.
"""
import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import numpy as np  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="out/tf1_flow")
    args = parser.parse_args(argv)

    from make_tf1_checkpoint import sample_variables, save_tf1

    from cudnn_port import RNNSpec, convert, reference, unpack
    from cudnn_port.judging.stock import tf1_cells

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
    got = tf1_cells(spec, "cudnn_lstm", os.path.join(args.out, "converted", "checkpoint"), x, lengths, h_0, c_0)
    want = reference.forward(unpack(spec, variables["cudnn_lstm/opaque_kernel"]), x, lengths, h_0, c_0)
    errors = [float(np.max(np.abs(g - w))) for g, w in zip(got, want) if w is not None]
    print(f"TF1 CPU cells vs cuDNN's math: max abs error {max(errors):.2e} (outputs, h_n, c_n)")
    return 0 if max(errors) <= 1e-5 else 1


if __name__ == "__main__":
    raise SystemExit(main())
