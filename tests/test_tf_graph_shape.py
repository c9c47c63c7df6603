"""The plain-ops SavedModel's graph shape, not its speed (``python bench/bench_exports.py --only saved_model`` times
it): which form each layer and direction takes, and how many nodes its loops run per step.

Speed at batch 1 is mostly per-op cost (docs/performance.md, "The loop"), so a change that adds ops to a loop body,
moves the mask back into the loop or swaps the recurrent product's kernel slows the stack road's SavedModel without
failing any parity test. Bounds: the node counts measured when these tests were written (TensorFlow 2.21) plus
about 10%, stated per count below; a form (op type in a body) is checked exactly."""
import collections
import functools

import numpy as np
import pytest

from helpers import make_spec, random_blob
from cudnn_port.layout import unpack

tf = pytest.importorskip("tensorflow")

from cudnn_port import tf_loop  # noqa: E402
from cudnn_port.exports.tensorflow import build_module  # noqa: E402

# mode -> (non-Const nodes of a four-step loop body, measured; of the serving graph outside the loops, measured)
MEASURED = {"lstm": (73, 239), "gru": (71, 212)}
SLACK = 1.1  # bound = measured * SLACK
MODEL_NODES = 1060  # non-Const, non-Placeholder nodes of the whole model's (below) SavedModel, measured


@functools.lru_cache(maxsize=None)
def graph_of(mode):
    """The with_initial_state graph (serving_default calls it with zero states) of a 2-layer bidirectional stack
    (input 5 != hidden 6): (graph_def, {body name: Counter of its op types}) for every while loop."""
    spec = make_spec(mode, 2, True, input_size=5, hidden=6)
    module = build_module(unpack(spec, random_blob(spec, seed=91)))
    graph_def = module.serve_state.graph.as_graph_def()
    functions = {f.signature.name: f for f in graph_def.library.function}
    loops = [n for n in graph_def.node if n.op in ("While", "StatelessWhile")]
    bodies = {n.attr["body"].func.name: collections.Counter(x.op for x in functions[n.attr["body"].func.name].node_def)
              for n in loops}
    return spec, graph_def, loops, bodies


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_each_direction_runs_a_four_step_loop_and_a_one_step_loop_of_plain_products(mode):
    spec, graph_def, loops, bodies = graph_of(mode)
    runs = spec.num_layers * spec.num_dirs
    assert len(loops) == 2 * runs, [n.op for n in loops]  # per layer and direction: the unrolled loop, the remainder
    unrolled = [ops for ops in bodies.values() if ops["MatMul"] == tf_loop.UNROLL]
    single = [ops for ops in bodies.values() if ops["MatMul"] == 1]
    assert len(unrolled) == len(single) == runs, bodies  # UNROLL steps below UNROLL_BELOW rows; one a step above
    for ops in bodies.values():  # no mask inside the loop, no former Conv2D or SparseMatMul product (TensorFlow.js
        # runs no SparseMatMul)
        assert not ops.keys() & {"Select", "SelectV2", "Conv2D", "BatchMatMulV2", "Einsum", "SparseMatMul"}, ops


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_node_counts_stay_within_their_bounds(mode):
    _, graph_def, _, bodies = graph_of(mode)
    body, outside = MEASURED[mode]
    for ops in bodies.values():
        if ops["MatMul"] == tf_loop.UNROLL:
            count = sum(n for op, n in ops.items() if op != "Const")
            assert count <= body * SLACK, f"a four-step {mode} loop body runs {count} ops (measured {body}): {ops}"
    count = sum(1 for n in graph_def.node if n.op != "Const")
    assert count <= outside * SLACK, f"{mode}: {count} nodes outside the loops (measured {outside})"


def whole_model_forms(model, tmp_path):
    """{op type: count} over the whole-model SavedModel of ``model`` (cudnn_port.export): its graph and every
    function."""
    import cudnn_port

    cudnn_port.export(model, str(tmp_path / "out"), formats=["saved_model"])
    loaded = tf.saved_model.load(str(tmp_path / "out" / "saved_model"))
    graph_def = loaded.signatures["serving_default"].graph.as_graph_def()
    every = list(graph_def.node) + [n for function in graph_def.library.function for n in function.node_def]
    nodes = {n.name: n for n in every}
    for node in nodes.values():  # its stacked weight computed outside the branch (where the constants fold once)
        if node.op == "BlockLSTMV2":
            into = nodes[node.input[4].split(":")[0]]
            assert (into.op, nodes[into.input[0].split(":")[0]].op) == ("Identity", "Switch"), node.input[4]
    return collections.Counter(n.op for n in every)


def test_whole_model_unmasked_lstm_takes_block_lstm_below_eight_rows_and_the_loop_above_and_both_match_keras(tmp_path):
    """An unmasked BiLSTM (2 x 16 units) gets one BlockLSTMV2 per direction in the branch a batch below UNROLL_BELOW
    takes, the one-step loop in the other, no four-step loop and nothing that zeroes or gathers after it; the masked
    BiGRU beside it keeps its loops and its gathers of each row's last state. Weights are constants (no
    variables). Both branches match Keras itself (random weights, ragged right-padded rows)."""
    keras = pytest.importorskip("keras")
    L = keras.layers
    x = keras.Input((None, 3), name="x")
    masked = L.Masking()(x)
    outputs = [L.Bidirectional(L.LSTM(16, return_sequences=True))(x), L.Bidirectional(L.GRU(8))(masked)]
    model = keras.Model(x, outputs)
    rng = np.random.default_rng(5)
    model.set_weights([rng.normal(size=w.shape).astype("float32") * 0.5 for w in model.get_weights()])
    ops = whole_model_forms(model, tmp_path)
    assert ops["BlockLSTMV2"] == 2, ops
    assert not ops["SparseMatMul"], ops  # plain MatMul products in every loop (TensorFlow.js runs no SparseMatMul)
    # the BiLSTM's one-step loops, two for each direction of the BiGRU (the frozen graph holds them lowered: one
    # LoopCond each)
    assert ops["StatelessWhile"] + ops["While"] + ops["LoopCond"] == 2 + 2 * 2, ops
    assert ops["GatherNd"] == 2, ops  # the masked BiGRU's final states only
    assert not ops["ReadVariableOp"] and not ops["VarHandleOp"], ops  # weights frozen in
    count = sum(n for op, n in ops.items() if op not in ("Const", "Placeholder"))
    assert count <= MODEL_NODES * SLACK, f"{count} nodes (measured {MODEL_NODES}): {ops}"
    serve = tf.saved_model.load(str(tmp_path / "out" / "saved_model")).signatures["serving_default"]
    steps = 7
    for batch in (3, tf_loop.UNROLL_BELOW + 1):
        lengths = np.resize(np.array([steps, 1, 4, 6]), batch)
        valid = np.arange(steps)[None, :, None] < lengths[:, None, None]
        feed = (rng.normal(size=(batch, steps, 3)) * valid).astype("float32")
        got = serve(x=tf.constant(feed))
        for index, want in enumerate(model(feed)):
            want = np.asarray(want)
            err = np.abs(got[f"output_{index}"].numpy() - want)
            assert np.all(err <= 1e-5 + 1e-4 * np.abs(want)), f"batch {batch} output {index}: max |error| {err.max()}"



def test_whole_model_lstm_past_block_lstm_units_keeps_its_loops(tmp_path):
    """Above BLOCK_LSTM_UNITS (BlockLSTMV2 slower than the loop at batch 1) an unmasked LSTM keeps both loops."""
    keras = pytest.importorskip("keras")
    from cudnn_port.tf_block_lstm import BLOCK_LSTM_UNITS

    x = keras.Input((None, 3))
    ops = whole_model_forms(keras.Model(x, keras.layers.LSTM(BLOCK_LSTM_UNITS + 1)(x)), tmp_path)
    assert not ops["BlockLSTMV2"] and not ops["SparseMatMul"], ops
    assert ops["StatelessWhile"] + ops["While"] + ops["LoopCond"] == 2, ops  # the four-step loop and the one-step
