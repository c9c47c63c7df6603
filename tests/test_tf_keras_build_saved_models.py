"""tf_keras SavedModels of the kinds users bring (tests/fixtures/make_tf_keras_build_saved_models.py, tf_keras 2.21 on
tensorflow-cpu; tf_keras is not needed here): traced on a build without CUDA (the GRU's cuDNN params left in z, r, h
order), traced as on ROCm (the LSTM's in MIOpen's i, f, o, c), a three-LSTM stack, a TF <= 2.10 optimizer with
slot variables, float32 token inputs feeding an Embedding, several inputs and outputs, states in and out.

The judge is tf_keras itself: ``expected.npz`` holds the original ``serving_default``'s outputs, computed on CPU by
stock TensorFlow when the fixtures were made. ``convert`` then ``verify`` exit 0, and OUT/saved_model and
OUT/model.onnx match those outputs.
"""
import json
import os

import numpy as np
import pytest

from helpers import ROOT, run_cli, unpack_fixture

tf = pytest.importorskip("tensorflow")
ARCHIVE = os.path.join(ROOT, "tests", "fixtures", "tf_keras_build_saved_models.tar.xz")
MODELS = ["gru_cpu_build", "lstm_cpu_build", "rocm_build", "three_lstms", "legacy_adam", "seq2seq", "decoder_step"]
ATOL = 1e-5  # fp32, tiny models: measured <= 1.8e-7 (ONNX) and 0 (SavedModel, the same standard functions)


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    return unpack_fixture(tmp_path_factory, ARCHIVE, "tf_keras_build_saved_models")


def split(expected, name):
    """(inputs, outputs) of fixture ``name``: {key: array} each."""
    pick = lambda kind: {k.split("/", 2)[2]: v for k, v in expected.items()
                         if k.startswith(f"{name}/{kind}/")}
    return pick("in"), pick("out")


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_tf_keras_saved_model_of_any_build_matches_the_original(tmp_path, capsys, fixtures, name):
    from cudnn_port.exports.runners import onnx_session

    folder, expected = fixtures
    feeds, want = split(expected, name)
    out = tmp_path / "out"
    code, _, err = run_cli(capsys, "convert", folder / name, out)
    assert code == 0, err
    code, report, err = run_cli(capsys, "verify", out, "--json")
    assert code == 0, report + err
    judged = [r for r in json.loads(report)["rows"] if r["artifact"] == "onnx (onnxruntime)"]
    assert judged and all(r["judge"] == "the original SavedModel" for r in judged), judged  # its CPU twins ran
    signature = tf.saved_model.load(str(out / "saved_model")).signatures["serving_default"]
    got = {k: v.numpy() for k, v in signature(**feeds).items()}
    session = onnx_session(out / "model.onnx")
    onnx_got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    assert set(got) == set(want) == set(onnx_got)
    for key, value in want.items():
        np.testing.assert_allclose(got[key], value, atol=ATOL, rtol=0, err_msg=f"{name} SavedModel {key}")
        np.testing.assert_allclose(onnx_got[key], value, atol=ATOL, rtol=0, err_msg=f"{name} ONNX {key}")


@pytest.mark.slow
def test_a_gate_order_the_graph_road_gets_wrong_fails_only_the_onnx_row(tmp_path, capsys, fixtures, monkeypatch):
    """The graph road reads a tf_keras GRU's params with its first two gate blocks of the input matrix swapped (a
    planted error in :mod:`cudnn_port.graphs.layouts`, which only the ONNX is written through): verify, judging by
    the original's own CPU twin, fails the ONNX row and nothing else; the SavedModel (the original's CPU functions)
    passes."""
    from cudnn_port.graphs import layouts

    real = layouts.params_permutation

    def wrong(function_def, node_name, spec):
        perm = real(function_def, node_name, spec)
        perm = np.arange(spec.param_count) if perm is None else perm.copy()
        block = spec.num_units * spec.input_size
        perm[:block], perm[block:2 * block] = perm[block:2 * block].copy(), perm[:block].copy()
        return perm

    folder, _ = fixtures
    monkeypatch.setattr(layouts, "params_permutation", wrong)
    code, _, err = run_cli(capsys, "convert", folder / "gru_cpu_build", tmp_path / "out")
    assert code == 0, err
    code, report, err = run_cli(capsys, "verify", tmp_path / "out", "--json")
    rows = json.loads(report)["rows"]
    failed = {r["artifact"] for r in rows if r["passed"] is False}
    assert code == 1 and failed == {"onnx (onnxruntime)"}, failed
    assert all(r["judge"] == "the original SavedModel" for r in rows if r["artifact"] in failed)


def test_token_inputs_declared_float_get_ids_in_the_vocabulary(fixtures):
    """verify's feeds for a signature whose float32 inputs index an Embedding of 9 rows: integer ids in [1, 9) (0,
    a masking Embedding's padding, left out);
    the original model raises on the N(0, 1) floats it fed before."""
    from cudnn_port.judging.signature_feeds import signature_feeds

    folder, expected = fixtures
    _, want = split(expected, "seq2seq")
    signature = tf.saved_model.load(str(folder / "seq2seq")).signatures["serving_default"]
    feeds, note = signature_feeds(signature, seed=0)
    assert "encoder_tokens in [1, 9)" in note and "decoder_tokens in [1, 9)" in note, note
    for key in ("encoder_tokens", "decoder_tokens"):
        ids, padded = feeds[key][:-1], feeds[key][-1]  # the last row: 2 ids, then padding 0
        assert not padded[2:].any() and padded[:2].min() >= 1, padded
        assert ids.dtype == np.float32 and (ids == np.round(ids)).all() and ids.min() >= 1 and ids.max() < 9
        assert len(np.unique(ids)) > 3  # not one constant id
    results = signature(**feeds)  # the original model accepts them
    assert set(results) == set(want)


def test_a_row_that_cannot_run_says_why_in_one_line():
    """An ONNX model that onnxruntime cannot run (Expand to a negative shape) and a TensorFlow graph fed an id
    outside its table: the row is failed, marked not run, and names the node and the reason in one line."""
    import onnx
    from onnx import TensorProto, helper

    import onnxruntime

    from cudnn_port.judging.graph_inputs import could_not_run

    graph = helper.make_graph(
        [helper.make_node("Sub", ["n", "one"], ["shape"], name="Sub_1"),
         helper.make_node("Expand", ["x", "shape"], ["y"], name="Expand__269")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1]),
              helper.make_tensor_value_info("n", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor("one", TensorProto.INT64, [1], [1])])
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"expand_{os.getpid()}.onnx")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what the oldest onnxruntime CI runs (1.15) loads
    onnx.save(model, path)
    try:
        session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        with pytest.raises(Exception) as raised:
            session.run(["y"], {"x": np.ones(1, np.float32), "n": np.array([-2], np.int64)})
    finally:
        os.remove(path)
    row = could_not_run("onnx (onnxruntime)", "onnxruntime", raised.value)
    assert row["passed"] is False and row["ran"] is False
    assert row["note"].startswith("could not run: onnxruntime failed:") and "Expand__269" in row["note"], row
    assert "\n" not in row["note"]

    table = tf.Variable(np.arange(12, dtype=np.float32).reshape(4, 3))

    @tf.function
    def lookup(ids):
        return tf.nn.embedding_lookup(table, tf.cast(ids, tf.int32))

    with pytest.raises(Exception) as raised:
        lookup(tf.constant([1.0, -1.0]))
    row = could_not_run("saved_model [serving_default]", "TensorFlow", raised.value)
    assert row["passed"] is False and "\n" not in row["note"]
    assert "-1 is not in [0, 4)" in row["note"] and "in node" in row["note"], row


@pytest.mark.slow
def test_convert_names_the_node_of_an_onnx_model_that_does_not_run(tmp_path, capsys, fixtures, monkeypatch):
    """convert runs the ONNX it wrote once on the serving signature's inputs: an ONNX that onnxruntime cannot run
    (here one whose Expand gets a negative shape) fails convert with exit 1, one line naming the node, and nothing
    published."""
    import onnx
    from onnx import TensorProto, helper

    from cudnn_port.exports import onnx_tf

    def broken_onnx(saved_model, path, signature="serving_default"):
        nodes = [helper.make_node("Shape", ["signal"], ["shape"]),
                 helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
                 helper.make_node("Sub", ["zero", "batch"], ["negative"]),
                 helper.make_node("Expand", ["one", "negative"], ["dense_1"], name="Expand__269")]
        graph = helper.make_graph(nodes, "broken", [helper.make_tensor_value_info("signal", TensorProto.FLOAT,
                                                                                   ["batch", "time", 5])],
                                  [helper.make_tensor_value_info("dense_1", TensorProto.FLOAT, None)],
                                  [helper.make_tensor("zero", TensorProto.INT64, [1], [0]),
                                   helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        onnx.save(model, str(path))

    monkeypatch.setattr(onnx_tf, "write_saved_model_onnx", broken_onnx)
    folder, _ = fixtures
    code, _, err = run_cli(capsys, "convert", folder / "lstm_cpu_build", tmp_path / "out")
    assert code == 1, err
    line = [ln for ln in err.splitlines() if ln.startswith("cudnn-port:")]
    assert len(line) == 1 and "Expand__269" in line[0] and "onnxruntime" in line[0], err
    assert not (tmp_path / "out").exists()


def test_params_built_in_an_unknown_layout_are_refused_in_one_line():
    """A GPU function whose params are no permutation of its Keras weights (here the kernel scaled by 2) cannot be
    put in cuDNN's order: refused with one line, never converted as if it were cuDNN's."""
    from cudnn_port.errors import UnsupportedError
    from cudnn_port.graphs.layouts import params_permutation
    from cudnn_port.layout import RNNSpec

    spec = RNNSpec("gru", 1, 3, 4)

    @tf.function(input_signature=[tf.TensorSpec([2, 5, 4]), tf.TensorSpec([1, 2, 3]), tf.TensorSpec([4, 9]),
                                  tf.TensorSpec([3, 9]), tf.TensorSpec([2, 9])])
    def gpu_gru(inputs, init_h, kernel, recurrent_kernel, bias):
        params = tf.concat([tf.reshape(tf.transpose(k), [-1]) for k in tf.split(kernel * 2.0, 3, axis=1)] +
                           [tf.reshape(tf.transpose(k), [-1]) for k in tf.split(recurrent_kernel, 3, axis=1)] +
                           [tf.reshape(bias, [-1])], 0)
        return tf.raw_ops.CudnnRNNV3(input=inputs, input_h=init_h, input_c=0.0, params=params,
                                     sequence_lengths=[5, 5], rnn_mode="gru", time_major=False)[0]

    function_def = gpu_gru.get_concrete_function().function_def
    node = next(n.name for n in function_def.node_def if n.op == "CudnnRNNV3")
    with pytest.raises(UnsupportedError) as raised:
        params_permutation(function_def, node, spec)
    assert "no gate order" in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.parametrize("mode,swapped", [("lstm", False), ("gru", True), ("gru", False)])
def test_tf20_functions_given_variable_handles_get_their_gate_order(mode, swapped):
    """tf.keras 2.0's ``cudnn_lstm`` / ``cudnn_gru`` take the layer's variables as handles (``DT_RESOURCE``
    arguments read by ``ReadVariableOp``) and build params from the values read: the gate order is found through the
    reads, as for float arguments. TF 2.0 swaps a GRU's z and r into cuDNN's r, z, h itself (nothing to gather); a
    construction that does not swap them (as tf_keras on a build without CUDA) gets exactly that block swap, here
    counted out by hand, block by block."""
    from cudnn_port.graphs.layouts import params_permutation
    from cudnn_port.layout import RNNSpec

    G, H, I = (4, 3, 5) if mode == "lstm" else (3, 3, 4)
    spec = RNNSpec(mode, 1, H, I)
    handle = tf.TensorSpec([], tf.resource)

    @tf.function(input_signature=[tf.TensorSpec([2, 6, I]), tf.TensorSpec([1, 2, H]), handle, handle, handle])
    def cudnn_rnn(inputs, init_h, kernel, recurrent_kernel, bias):
        kernel, recurrent_kernel, bias = (tf.raw_ops.ReadVariableOp(resource=v, dtype=tf.float32)
                                          for v in (kernel, recurrent_kernel, bias))
        weights = tf.split(kernel, G, axis=1) + tf.split(recurrent_kernel, G, axis=1)
        biases = tf.split(tf.concat([tf.zeros_like(bias), bias], 0) if mode == "lstm" else tf.reshape(bias, [-1]),
                          2 * G)
        if swapped:
            for blocks in (weights, biases):
                for at in (0, G):
                    blocks[at], blocks[at + 1] = blocks[at + 1], blocks[at]
        params = tf.concat([tf.reshape(tf.transpose(w), [-1]) for w in weights] + biases, 0)
        return tf.raw_ops.CudnnRNN(input=inputs, input_h=init_h, input_c=init_h, params=params, rnn_mode=mode)[0]

    function_def = cudnn_rnn.get_concrete_function().function_def
    assert [a.type for a in function_def.signature.input_arg][2:] == [tf.resource.as_datatype_enum] * 3
    node = next(n.name for n in function_def.node_def if n.op == "CudnnRNN")
    perm = params_permutation(function_def, node, spec)
    if mode == "lstm" or swapped:
        assert perm is None  # already cuDNN's order (LSTM i, f, c, o; GRU r, z, h)
        return
    want, start = [], 0
    for size in (H * I, H * H, H, H):  # W, R, b_W, b_R: 3 gate blocks each, the first two swapped
        blocks = [np.arange(start + g * size, start + (g + 1) * size) for g in range(G)]
        want += [blocks[1], blocks[0], blocks[2]]
        start += G * size
    np.testing.assert_array_equal(perm, np.concatenate(want))


@pytest.mark.slow
def test_only_params_built_out_of_cudnn_order_are_reordered(fixtures):
    """Which cuDNN nodes get their params gathered into cuDNN's gate layout (manifest ``params_reordered``) follows
    tf_keras's gpu_lstm / gpu_gru (docs/conventions.md, section 7): an LSTM traced on a CUDA or CPU build passes its
    i, f, c, o gates as they are, which is cuDNN's order, and zeros for b_W; on ROCm it reorders them to MIOpen's; a
    GRU is swapped into cuDNN's r, z, h only on CUDA builds. The zeros of an LSTM's b_W are no reordering."""
    from cudnn_port.graphs.layouts import put_params_in_cudnn_order
    from cudnn_port.graphs.nodes import find_nodes, load_proto
    from cudnn_port.graphs.prune import prune, select_gpu_implementations

    folder, _ = fixtures
    modes = {"lstm_cpu_build": (), "three_lstms": (), "seq2seq": (), "gru_cpu_build": ("gru",),
             "rocm_build": ("gru", "lstm")}
    for name, reordered in modes.items():
        proto = load_proto(str(folder / name))
        select_gpu_implementations(proto)
        prune(proto)
        nodes = find_nodes(proto)
        changed = put_params_in_cudnn_order(proto, nodes)
        forward = [n for n in nodes if not n.backward]
        want = {f"{n.function}/{n.name}" for n in forward if n.spec.mode in reordered}
        assert forward and set(changed) == want, (name, sorted(changed))
