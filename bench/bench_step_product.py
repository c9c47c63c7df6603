"""The recurrent product of one step, in TensorFlow's CPU kernels against onnxruntime's, in one run.

Each step of the plain-ops SavedModel's loops (:mod:`cudnn_port.tf_loop`) multiplies the state h [B, H] by the
recurrent weights [H, G*H] (G*H = 3H for GRU, 4H for LSTM; the bench stacks' H is 512). This times that product
alone: a chain of 100 steps ``h = tanh((h @ R)[:, :H])``, unrolled in one graph (no loop, no TensorArray), for

- TensorFlow: ``SparseMatMul`` with both operands dense, which the small-batch loops used before (TensorFlow.js
  refuses it); a 1x1 ``Conv2D`` (the loops' form before that); ``MatMul``, which the loops use; ``MatMul`` with the
  weights stored transposed (``transpose_b=True``); and the transposed product ``(R^T @ h^T)^T`` (``wt_ht``);
- onnxruntime: ``MatMul``, ``Slice`` and ``Tanh`` nodes, the ops its exports run per step;

once with one chain, and once with two independent chains in the same call, as the two directions of a layer run
side by side. Every chain has its own random weights. Reported: microseconds per step (per pair of steps with two
chains) and each TensorFlow kernel's ratio to onnxruntime's with the same number of chains, medians of alternating
blocks (:func:`bench_exports.time_blocks`). ``TF_ENABLE_ONEDNN_OPTS=0`` unless set, as in ``bench_exports.py``;
run it again with ``TF_ENABLE_ONEDNN_OPTS=1`` for TensorFlow's oneDNN kernels. ``--hidden`` takes several sizes (a
table row each), ``--batch`` the rows of h (1 unless given).

    python bench/bench_step_product.py [--gates 3|4] [--hidden 512 ...] [--batch 1] [--repeat 20] [--json]
"""
import argparse
import json
import os
import sys

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_exports import time_blocks

HIDDEN, STEPS = 512, 100
KERNELS = ("sparse_matmul", "conv2d_1x1", "matmul", "matmul_transpose_b", "wt_ht")


def tf_chain(kind, weights, batch=1):
    """A traced function running one chain of STEPS steps per weight matrix in ``weights`` ([H, G*H]), on h0
    [batch, H]."""
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")  # each size traces its own functions: TensorFlow's retracing warnings
    hidden = weights[0].shape[0]
    consts = [tf.constant(w.reshape(1, 1, *w.shape)) if kind == "conv2d_1x1" else
              tf.constant(np.ascontiguousarray(w.T)) if kind in ("matmul_transpose_b", "wt_ht") else tf.constant(w)
              for w in weights]

    @tf.function(input_signature=[tf.TensorSpec([batch, hidden])])
    def run(h0):
        outs = []
        for k, w in enumerate(consts):
            h = h0 + float(k)
            if kind == "conv2d_1x1":
                h = tf.reshape(h, [1, 1, batch, hidden])
            for _ in range(STEPS):
                if kind == "sparse_matmul":  # the small-batch loop's former product
                    g = tf.raw_ops.SparseMatMul(a=h, b=w)
                elif kind == "conv2d_1x1":
                    g = tf.nn.conv2d(h, w, 1, "VALID")
                elif kind == "matmul":
                    g = tf.matmul(h, w)
                elif kind == "wt_ht":
                    g = tf.transpose(tf.matmul(w, h, transpose_b=True))
                else:
                    g = tf.matmul(h, w, transpose_b=True)
                h = tf.tanh(g[..., :hidden])
            outs.append(tf.reshape(h, [batch, hidden]))
        return tf.add_n(outs)

    return lambda f: run(f["h"]).numpy()


def onnx_chain(weights, batch=1):
    """The same chains as one ONNX graph in an onnxruntime session (the exports' runner settings)."""
    from onnx import TensorProto, helper, numpy_helper

    from cudnn_port.exports.onnx import IR_VERSION, OPSET
    from cudnn_port.exports.runners import onnx_session

    hidden = weights[0].shape[0]
    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (("lo", [0]), ("hi", [hidden]),
                                                                            ("axis", [1]))]
    nodes, ends = [], []
    for k, w in enumerate(weights):
        inits.append(numpy_helper.from_array(w, f"R{k}"))
        nodes.append(helper.make_node("Add", ["h", f"k{k}"], [f"c{k}_0"]))
        inits.append(numpy_helper.from_array(np.array([float(k)], np.float32), f"k{k}"))
        for t in range(STEPS):
            nodes += [helper.make_node("MatMul", [f"c{k}_{t}", f"R{k}"], [f"g{k}_{t}"]),
                      helper.make_node("Slice", [f"g{k}_{t}", "lo", "hi", "axis"], [f"s{k}_{t}"]),
                      helper.make_node("Tanh", [f"s{k}_{t}"], [f"c{k}_{t + 1}"])]
        ends.append(f"c{k}_{STEPS}")
    nodes.append(helper.make_node("Sum", ends, ["out"]))
    graph = helper.make_graph(nodes, "chains",
                              [helper.make_tensor_value_info("h", TensorProto.FLOAT, [batch, hidden])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [batch, hidden])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    run = onnx_session(model.SerializeToString()).run
    return lambda f: run(None, f)[0]


def measure(gates, hidden, batch, repeat, rng):
    """{"1_chain": row, "2_chains": row} for one size: each kernel's microseconds per step and its ratio to
    onnxruntime's, after checking that every kernel computes onnxruntime's numbers."""
    feeds = {"h": rng.normal(size=(batch, hidden)).astype(np.float32)}
    # scale 0.05 at the bench stacks' 512, the same per-step gain at every size (so 100 steps amplify rounding alike,
    # and the check below holds at each)
    scale = 0.05 * (HIDDEN / hidden) ** 0.5
    results = {}
    for chains in (1, 2):
        weights = [(rng.normal(size=(hidden, gates * hidden)) * scale).astype(np.float32) for _ in range(chains)]
        runners = [onnx_chain(weights, batch)] + [tf_chain(kind, weights, batch) for kind in KERNELS]
        reference = runners[0](feeds)
        for kind, run in zip(KERNELS, runners[1:]):  # the same numbers, so the same work is timed
            error = float(np.abs(run(feeds) - reference).max())
            if error > 1e-4:
                raise SystemExit(f"{kind} differs from onnxruntime by {error:.2e}: not the same product")
        times = time_blocks([(run, feeds) for run in runners], repeat)
        row = {"onnxruntime_us_per_step": times[0] / STEPS * 1e6}
        for kind, spent in zip(KERNELS, times[1:]):
            row[f"{kind}_us_per_step"] = spent / STEPS * 1e6
            row[f"{kind}_over_onnxruntime"] = spent / times[0]
            row[f"{kind}_over_matmul"] = spent / times[1 + KERNELS.index("matmul")]
        results[f"{chains}_chain" + ("s" if chains > 1 else "")] = row
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gates", type=int, choices=(3, 4), default=4, help="3: GRU's product, 4: LSTM's")
    parser.add_argument("--hidden", type=int, nargs="+", default=[HIDDEN], help="hidden sizes, a row each")
    parser.add_argument("--batch", type=int, default=1, help="rows of h")
    parser.add_argument("--repeat", type=int, default=20, help="calls per timed block")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    rows = {hidden: measure(args.gates, hidden, args.batch, args.repeat, rng) for hidden in args.hidden}
    if args.json:
        one = rows[args.hidden[0]] if len(rows) == 1 else {"sizes": {str(k): v for k, v in rows.items()}}
        print(json.dumps({"gates": args.gates, "batch": args.batch, "steps": STEPS, "hidden": args.hidden, **one},
                         indent=1))
        return
    onednn = os.environ["TF_ENABLE_ONEDNN_OPTS"]
    for hidden, results in rows.items():
        print(f"one step's product: h [{args.batch}, {hidden}] @ R [{hidden}, {args.gates * hidden}], then slice and "
              f"tanh (TF_ENABLE_ONEDNN_OPTS={onednn})")
        for key in ("1_chain", "2_chains"):
            row = results[key]
            parts = [f"onnxruntime {row['onnxruntime_us_per_step']:.1f} us"]
            parts += [f"{kind} {row[f'{kind}_us_per_step']:.1f} us ({row[f'{kind}_over_onnxruntime']:.2f}x, "
                      f"{row[f'{kind}_over_matmul']:.2f}x matmul)" for kind in KERNELS]
            print(f"  {key.replace('_', ' ')}: " + ", ".join(parts))


if __name__ == "__main__":
    main()
