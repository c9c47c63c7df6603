"""Two kinds of published SavedModel: tf.keras 2.0-2.2 graphs that record no shapes, and raw-text models whose
signature starts with TextVectorization.

- TF 2.0 style: today's TensorFlow cannot write a tf.keras 2.0 SavedModel, so the tf_keras 2.21 fixtures
  (tests/fixtures/make_tf_keras_saved_models.py) are made to look like one inside the test: every shape a TF >= 2.3
  records is dropped (functions' ``_input_shapes``, arguments' ``_output_shapes`` and ``_handle_data``, nodes'
  ``_output_shapes``), so shape inference over the cuDNN node's function alone knows neither its inputs nor its
  params' size, as with the published TF 2.0 models. What stays newer than TF 2.0: the function names
  (``gpu_lstm_with_fallback``, not ``cudnn_lstm_with_fallback``), ``CudnnRNNV3`` in place of 2.0's ``CudnnRNN``
  for unmasked layers, and the object graph's ``canonicalized_input_signature`` layout.
- Raw text: tests/fixtures/make_tf_keras_text_saved_models.py (tf_keras 2.21): the tutorial's
  ``Sequential([TextVectorization, model, Activation])`` with a Bidirectional(LSTM) in the nested model, and
  TextVectorization -> GRU -> GRU, trained a few steps, ``model.save()``.

The judge is each original's own outputs (tf_keras's for the first kind; the original ``serving_default`` run on CPU
in a ``tf.compat.v1`` session for the second), on the inputs stored beside it.
"""
import json
import os
import shutil

import numpy as np
import pytest

from helpers import ROOT, unpack_fixture
from cudnn_port import convert
from cudnn_port.verify import verify

tf = pytest.importorskip("tensorflow")
# the float32 bar of every Keras-judged row (parity.ATOL, RTOL); measured: at most 6e-8 on outputs up to 0.6 in size
# (TensorFlow 2.21, onnxruntime 1.31), so it leaves room for other CPUs' summation order and nothing for a wrong gate
ATOL, RTOL = 1e-5, 1e-4


@pytest.fixture(scope="module")
def keras_models(tmp_path_factory):
    return unpack_fixture(tmp_path_factory, os.path.join(ROOT, "tests", "fixtures", "tf_keras_saved_models.tar.xz"),
                          "tf_keras_saved_models")


@pytest.fixture(scope="module")
def text_models(tmp_path_factory):
    return unpack_fixture(tmp_path_factory, os.path.join(ROOT, "tests", "fixtures",
                                                         "tf_keras_text_saved_models.tar.xz"),
                          "tf_keras_text_saved_models")


def tf20_style(source, target):
    """A copy of SavedModel ``source`` at ``target`` without the shapes TF 2.0 did not record."""
    from tensorflow.core.protobuf import saved_model_pb2

    shutil.copytree(source, target, ignore=shutil.ignore_patterns("fingerprint.pb"))
    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString((target / "saved_model.pb").read_bytes())
    for meta in proto.meta_graphs:
        for function in meta.graph_def.library.function:
            function.attr.pop("_input_shapes", None)
            for arg in function.arg_attr.values():
                arg.attr.pop("_output_shapes", None)
                arg.attr.pop("_handle_data", None)
            for node in function.node_def:
                node.attr.pop("_output_shapes", None)
    (target / "saved_model.pb").write_bytes(proto.SerializeToString())
    return target


def close(got, want, what):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, what
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=RTOL, err_msg=what)


@pytest.mark.parametrize("name", ["bilstm", "tagger"])
@pytest.mark.slow
def test_tf20_style_graph_sizes_nodes_from_callers(tmp_path, keras_models, name):
    from cudnn_port.exports.runners import onnx_session
    from cudnn_port.graphs import load_proto
    from cudnn_port.graphs.reach import reach
    from cudnn_port.graphs.nodes import _function_input_shapes
    from cudnn_port.inspection import inspect_source

    folder, expected = keras_models
    source = tf20_style(folder / name, tmp_path / name)
    proto = load_proto(str(source))
    function = next(f for f in proto.meta_graphs[0].graph_def.library.function
                    if any(n.op.startswith("CudnnRNN") and "Backprop" not in n.op for n in f.node_def))
    shapes = _function_input_shapes(function)
    assert all(s[3].rank is None or s[3][0] is None for s in shapes.values())  # the node's params: size unknown
    reached = reach(proto)  # the GPU alternatives of what the signature calls, sized from their callers
    assert not reached["called"] and reached["gpu_alternatives"]
    assert {n.spec.num_units for n in reached["gpu_alternatives"]} == {4}
    report = inspect_source(str(source))
    reached = reached_report = report["gpu_alternatives"]
    assert reached and {(r["spec"]["num_units"], r["spec"]["input_size"]) for r in reached} <= {(4, 5), (4, 6)}
    out = tmp_path / "out"
    manifest = convert(str(source), out)
    assert manifest["gpu_alternatives"] == reached_report  # one answer: inspect and convert agree
    x = expected[f"{name}/x"]
    signature = tf.saved_model.load(str(out / "saved_model")).signatures["serving_default"]
    feed = list(signature.structured_input_signature[1])[0]
    got = list(signature(**{feed: tf.constant(x)}).values())[0].numpy()
    close(got, expected[f"{name}/y"], f"{name}: saved_model against tf_keras")
    session = onnx_session(str(out / "model.onnx"))
    onnx_out = session.run(None, {session.get_inputs()[0].name: x})[0]
    if name == "tagger":  # right-padded rows: ONNX's fused GRU stops at each row's length, as cuDNN does
        valid = x != 0
        onnx_out, want = onnx_out[valid], expected[f"{name}/y"][valid]
    else:
        want = expected[f"{name}/y"]
    close(onnx_out, want, f"{name}: model.onnx against tf_keras")
    report = verify(str(out))  # the original's serving_default runs on CPU (Grappler picks the standard twins)
    assert report["passed"], report["rows"]
    assert any(r["judge"] == "the original SavedModel" and r["passed"] for r in report["rows"]), report["rows"]


def tf20_handles_model(folder, seed=3, mode="lstm", construction="weights"):
    """A SavedModel shaped as tf.keras 2.0 wrote an LSTM (or reset-after GRU) layer: ``serving_default`` calls a
    standard function that takes the layer's variables as handles (``DT_RESOURCE`` arguments, read inside), and its
    GPU twin (same ``api_implements``, ``api_preferred_device`` GPU, as Grappler's implementation selector wants it)
    reads them and builds params for a ``CudnnRNN`` node as TF 2.0's ``cudnn_lstm`` / ``cudnn_gru`` did (kernels
    split and transposed per gate; LSTM b_W = zeros_like(bias); GRU z and r swapped into cuDNN's r, z, h).
    ``construction``: "weights" (from the weights alone), "control" (the reads wait on an assertion over the
    inputs), "inputs" (params also computed from the inputs' shape, exactly 1.0 times themselves: the graph alone
    cannot tell their layout). Returns (inputs, the model's own outputs for them: stock TensorFlow running the
    standard function)."""
    import uuid

    I, H, G = 5, 4, (4 if mode == "lstm" else 3)
    rng = np.random.default_rng(seed)
    handle = tf.TensorSpec([], tf.resource)
    states = [tf.TensorSpec([None, H])] * (2 if mode == "lstm" else 1)
    signature = [tf.TensorSpec([None, None, I])] + states + [handle] * 3
    bias_shape = (G * H,) if mode == "lstm" else (2, G * H)
    api = f"{mode}_{uuid.uuid4().hex}"
    attributes = lambda device: {"api_implements": api, "api_preferred_device": device}

    def reads(inputs, *handles):
        waits = [tf.debugging.Assert(tf.reduce_all(tf.shape(inputs) > 0), ["empty"])] \
            if construction == "control" else []
        with tf.control_dependencies(waits):
            values = [tf.raw_ops.ReadVariableOp(resource=v, dtype=tf.float32) for v in handles]
        for value, shape in zip(values, [(I, G * H), (H, G * H), bias_shape]):
            value.set_shape(shape)
        return values

    def step_lstm(k, rk, b):
        def step(carry, x):
            h, c = carry
            i, f, g, o = tf.split(tf.matmul(x, k) + tf.matmul(h, rk) + b, 4, axis=1)
            c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
            return tf.sigmoid(o) * tf.tanh(c), c
        return step

    def step_gru(k, rk, b):
        def step(carry, x):
            h, = carry
            xz, xr, xh = tf.split(tf.matmul(x, k) + b[0], 3, axis=1)
            hz, hr, hh = tf.split(tf.matmul(h, rk) + b[1], 3, axis=1)
            z, r = tf.sigmoid(xz + hz), tf.sigmoid(xr + hr)
            return (z * h + (1 - z) * tf.tanh(xh + r * hh),)
        return step

    def standard_body(inputs, carry, kernel, recurrent_kernel, bias):
        k, rk, b = reads(inputs, kernel, recurrent_kernel, bias)
        step = (step_lstm if mode == "lstm" else step_gru)(k, rk, b)
        hs = tf.scan(step, tf.transpose(inputs, [1, 0, 2]), carry)[0]
        return tf.transpose(hs, [1, 0, 2])

    def cudnn_body(inputs, carry, kernel, recurrent_kernel, bias):
        k, rk, b = reads(inputs, kernel, recurrent_kernel, bias)
        weights = tf.split(k, G, axis=1) + tf.split(rk, G, axis=1)
        if mode == "lstm":
            biases = tf.split(tf.concat([tf.zeros_like(b), b], 0), 8)
        else:
            biases = tf.split(tf.reshape(b, [-1]), 6)
            for blocks in (weights, biases):
                blocks[0], blocks[1], blocks[3], blocks[4] = blocks[1], blocks[0], blocks[4], blocks[3]
        params = tf.concat([tf.reshape(tf.transpose(w), [-1]) for w in weights] + biases, 0)
        if construction == "inputs":
            params = params * tf.cast(tf.shape(inputs)[0] > 0, params.dtype)
        init = [s[None] for s in carry] + ([] if mode == "lstm" else [tf.zeros([1, 1, H])])
        out = tf.raw_ops.CudnnRNN(input=tf.transpose(inputs, [1, 0, 2]), input_h=init[0], input_c=init[1],
                                  params=params, rnn_mode=mode)[0]
        return tf.transpose(out, [1, 0, 2])

    def named(body, device):  # the arguments named as tf.keras named them: the weights found by name
        if mode == "lstm":
            def function(inputs, init_h, init_c, kernel, recurrent_kernel, bias):
                return body(inputs, (init_h, init_c), kernel, recurrent_kernel, bias)
        else:
            def function(inputs, init_h, kernel, recurrent_kernel, bias):
                return body(inputs, (init_h,), kernel, recurrent_kernel, bias)
        return tf.function(function, input_signature=signature, experimental_attributes=attributes(device))

    standard, cudnn = named(standard_body, "CPU"), named(cudnn_body, "GPU")

    class Model(tf.Module):
        def __init__(self):
            super().__init__()
            self.kernel, self.recurrent_kernel, self.bias, self.dense = (
                tf.Variable(rng.normal(size=shape).astype("float32") * 0.5)
                for shape in [(I, G * H), (H, G * H), bias_shape, (H, 2)])

        @tf.function(input_signature=[tf.TensorSpec([None, None, I], name="signal")])
        def serve(self, x):
            zeros = [tf.zeros([tf.shape(x)[0], H])] * len(states)
            cudnn.get_concrete_function().add_to_graph()  # registered beside the call, as tf.keras did
            sequence = standard(x, *zeros, self.kernel.handle, self.recurrent_kernel.handle, self.bias.handle)
            return {"dense": tf.matmul(sequence, self.dense)}

    model = Model()
    tf.saved_model.save(model, str(folder), signatures={"serving_default": model.serve})
    x = rng.normal(size=(3, 6, I)).astype("float32")
    return x, model.serve(tf.constant(x))["dense"].numpy()


@pytest.mark.slow
def test_tf20_lstm_given_variable_handles_gets_its_onnx(tmp_path):
    """tf.keras 2.0 passed an LSTM layer's variables to its functions as handles; the GPU twin's params are built
    from the values read. Its gate order is found through those reads, so model.onnx is written (it was skipped with
    "cannot tell the gate order of its params ... (KeyError)") and matches the model's own CPU outputs, with the
    graph's recorded shapes dropped as TF 2.0 recorded none."""
    from cudnn_port.exports.runners import onnx_session

    x, want = tf20_handles_model(tmp_path / "saved")
    source = tf20_style(tmp_path / "saved", tmp_path / "tf20")
    manifest = convert(str(source), tmp_path / "out")
    assert "onnx" in manifest["model_artifacts"], manifest.get("warnings")
    session = onnx_session(str(tmp_path / "out" / "model.onnx"))
    close(session.run(None, {"signal": x})[0], want, "model.onnx against the model's own CPU outputs")
    report = verify(str(tmp_path / "out"))
    assert report["passed"], report["rows"]
    assert any(r["judge"] == "the original SavedModel" and r["artifact"].startswith("onnx") and r["passed"]
               for r in report["rows"]), report["rows"]


@pytest.mark.parametrize("name", ["text_bilstm", "text_gru"])
@pytest.mark.slow
def test_raw_text_model_converts_and_verifies(tmp_path, text_models, name):
    from cudnn_port.exports.runners import onnx_session
    from cudnn_port.graphs.onnx_parts import cut_values

    folder, expected = text_models
    feeds = {k.split("/")[-1]: v for k, v in expected.items() if k.startswith(f"{name}/in/")}
    want = {k.split("/")[-1]: v for k, v in expected.items() if k.startswith(f"{name}/out/")}
    out = tmp_path / "out"
    manifest = convert(str(folder / name), out)
    assert any("numeric part" in w and "StaticRegexReplace" in w for w in manifest["warnings"]), manifest["warnings"]
    assert manifest["onnx_input"]["name"] == "token_ids" and manifest["onnx_input"]["dtype"] == "int64"
    signature = tf.saved_model.load(str(out / "saved_model")).signatures["serving_default"]
    got = {k: v.numpy() for k, v in signature(**{k: tf.constant(v.astype(object)) for k, v in feeds.items()}).items()}
    for key, value in want.items():
        close(got[key], value, f"{name}: saved_model [{key}] against the original on English sentences")
    ids, whole = cut_values(str(out / "saved_model"), "serving_default", {k: v.astype(object) for k, v in
                                                                           feeds.items()}, manifest["onnx_input"]
                            ["replaces"])
    assert ids.dtype == np.int64 and (ids > 1).any()  # real words found in the vocabulary (0 pad, 1 unknown)
    for key, value in want.items():
        close(whole[key], value, f"{name}: the frozen signature [{key}] against the original")
    session = onnx_session(str(out / "model.onnx"))
    names = [o.name for o in session.get_outputs()]
    for key, value in zip(names, session.run(names, {"token_ids": ids})):
        close(value, want[key], f"{name}: model.onnx [{key}] on the token ids against the original")
    from cudnn_port.graphs.frozen import run_frozen

    frozen = run_frozen(out / "frozen_graph.pb", manifest["graphdef_nodes"], {k: v.astype(object) for k, v in
                                                                           feeds.items()})
    for key, value in want.items():
        close(frozen[key], value, f"{name}: frozen_graph.pb [{key}] (TF1 session) against the original")
    report = verify(str(out))
    rows = {r["artifact"]: r for r in report["rows"]}
    assert report["passed"], rows
    assert {"graphdef (TF1 session)", "onnx (onnxruntime)"} <= set(rows), rows
    assert all(rows[a]["judge"] == "the original SavedModel" for a in ("graphdef (TF1 session)", "onnx (onnxruntime)"))
    with open(out / "manifest.json") as f:
        assert json.load(f)["onnx_input"]["computed_from"]


@pytest.mark.slow
def test_raw_text_cli_says_what_onnx_takes(tmp_path, capsys, text_models):
    """No internal error: the CLI exits 0, its one warning names the op ONNX lacks and what model.onnx takes, and
    --json carries the same (``onnx_input``); with --formats onnx alone the numeric part is still written."""
    from cudnn_port import cli

    folder, _ = text_models
    code = cli.main(["convert", str(folder / "text_gru"), str(tmp_path / "out"), "--json"])
    out, err = capsys.readouterr()
    assert code == 0 and "internal error" not in err + out and "Traceback" not in err, err
    result = json.loads(out)
    assert result["onnx_input"]["name"] == "token_ids" and result["onnx_input"]["computed_from"] == ["input_2"]
    assert any("StaticRegexReplace" in w for w in result["warnings"]), result["warnings"]
    assert set(result["model_artifacts"]) == {"saved_model", "graphdef", "onnx"}
    code = cli.main(["convert", str(folder / "text_gru"), str(tmp_path / "onnx_only"), "--formats", "onnx"])
    _, err = capsys.readouterr()
    assert code == 0 and "numeric part" in err and os.path.exists(tmp_path / "onnx_only" / "model.onnx"), err


def test_a_failure_outside_the_cuDNN_nodes_is_one_warning_or_one_line():
    """onnx's checker rejecting an op tf2onnx left unconverted (the published raw-text models' HashTableV2) is a
    warning when the SavedModel is written, one line (exit 2) when nothing else was asked for; our own errors pass."""
    from onnx.checker import ValidationError

    from cudnn_port.errors import CudnnPortError
    from cudnn_port.formats import NotWritten
    from cudnn_port.graphs.onnx_parts import foreign_part

    with pytest.raises(NotWritten) as kept:  # the format registry's road makes it one warning
        with foreign_part(True):
            raise ValidationError("No Op registered for HashTableV2 with domain_version of 17\n\n==> Context: Bad node")
    assert str(kept.value) == ("ValidationError: No Op registered for HashTableV2 with domain_version of 17; "
                               "saved_model/ holds the whole signature")
    with pytest.raises(CudnnPortError, match="HashTableV2.*nothing else was asked for"):
        with foreign_part(False):
            raise ValidationError("No Op registered for HashTableV2 with domain_version of 17")
    with pytest.raises(KeyError):  # a bug of ours stays a bug (the CLI's internal error)
        with foreign_part(True):
            raise KeyError("x")


def test_tf20_reads_that_wait_on_an_assertion_are_read_from_the_graph(tmp_path):
    """The params' construction is followed along data edges only: reads of the weights that wait on an assertion
    over the inputs (a control edge) still run on marker values, so the layout is found from the graph and nothing
    is chosen by outputs; model.onnx matches the model's own CPU outputs."""
    from cudnn_port.exports.runners import onnx_session

    x, want = tf20_handles_model(tmp_path / "saved", construction="control")
    source = tf20_style(tmp_path / "saved", tmp_path / "tf20")
    convert(str(source), tmp_path / "out", formats=["onnx"])
    with open(tmp_path / "out" / "manifest.json") as f:
        assert not json.load(f)["params_reordered"]  # built in cuDNN's order, and found so: nothing chosen
    session = onnx_session(str(tmp_path / "out" / "model.onnx"))
    close(session.run(None, {"signal": x})[0], want, "model.onnx against the model's own CPU outputs")


@pytest.mark.parametrize("mode", ["lstm", "gru"])
@pytest.mark.slow
def test_tf20_layout_the_graph_cannot_tell_is_chosen_by_the_original(tmp_path, mode):
    """A GPU function whose params are computed from the inputs too (the marker run cannot run it: it was "cannot
    tell the gate order of its params ... (InvalidArgumentError)" and no model.onnx): one ONNX per candidate layout
    runs against the original's serving_default on CPU, and the one that matches is kept. model.onnx then matches
    the model's own outputs (stock TensorFlow running the standard function) and verify's onnx row, judged by the
    original, passes; the other candidate's model.onnx planted in its place fails that row."""
    import onnx

    from cudnn_port.exports.runners import onnx_session
    from cudnn_port.graphs.layout_choice import unknown_layouts
    from cudnn_port.graphs.onnx_parts import write_signature_onnx
    from cudnn_port.graphs.reach import gpu_selected

    x, want = tf20_handles_model(tmp_path / "saved", mode=mode, construction="inputs")
    source = tf20_style(tmp_path / "saved", tmp_path / "tf20")
    out = tmp_path / "out"
    manifest = convert(str(source), out)
    assert "onnx" in manifest["model_artifacts"], manifest.get("warnings")
    with open(out / "manifest.json") as f:
        [(key, said)] = json.load(f)["params_reordered"].items()
    assert "cuDNN's" in said and "original's outputs" in said, said  # TF 2.0 built them in cuDNN's order
    session = onnx_session(str(out / "model.onnx"))
    close(session.run(None, {"signal": x})[0], want, f"{mode}: model.onnx against the model's own CPU outputs")
    report = verify(str(out))
    assert report["passed"], report["rows"]
    assert any(r["judge"] == "the original SavedModel" and r["artifact"].startswith("onnx") and r["passed"]
               for r in report["rows"]), report["rows"]

    [unknown] = unknown_layouts(str(source))
    assert unknown.key == key and "InvalidArgumentError" in str(unknown)
    wrong = {name: perm for name, perm in unknown.candidates.items() if perm is not None}
    assert len(wrong) == 1, wrong
    with gpu_selected(str(source), None, {key: next(iter(wrong.values()))}) as selected:
        write_signature_onnx(selected, str(tmp_path / "wrong.onnx"), "serving_default")
    planted = onnx.load(str(tmp_path / "wrong.onnx"))
    got = onnx_session(str(tmp_path / "wrong.onnx")).run(None, {"signal": x})[0]
    assert np.abs(got - want).max() > 1e-2, f"{mode}: the wrong layout computes the same outputs: no test"
    onnx.save(planted, str(out / "model.onnx"))
    report = verify(str(out))
    assert not report["passed"]
    rows = [r for r in report["rows"] if r["artifact"].startswith("onnx")]
    assert rows and not any(r["passed"] for r in rows) and rows[0]["max_abs"] > 1e-2, rows


def test_tf20_layout_no_candidate_matches_is_one_line(tmp_path):
    """Where no candidate layout's model.onnx computes the original's outputs (here: an original shifted by 0.1),
    the choice is refused in one line naming the node and each layout tried; so is a choice between two layouts
    that both compute them."""
    from cudnn_port.errors import UnsupportedError
    from cudnn_port.graphs.layout_choice import choose_layouts, unknown_layouts

    x, want = tf20_handles_model(tmp_path / "saved", construction="inputs")
    source = tf20_style(tmp_path / "saved", tmp_path / "tf20")
    unknown = unknown_layouts(str(source))
    with pytest.raises(UnsupportedError) as refused:
        choose_layouts(str(source), "serving_default", unknown, lambda: ({"signal": x}, {"dense": want + 0.1}))
    line = str(refused.value)
    assert "\n" not in line and unknown[0].key in line and "no candidate layout" in line, line
    assert "i, f, c, o" in line and "i, f, o, c" in line and "--formats saved_model" in line, line
    source_outputs = lambda: ({"signal": x}, {"dense": want})  # the model's own outputs: one layout matches
    same = unknown[0].candidates[next(iter(unknown[0].candidates))]
    assert same is None
    unknown[0].candidates = {"cuDNN's": None, "the same again": np.arange(unknown[0].candidates.popitem()[1].size)}
    with pytest.raises(UnsupportedError, match="several candidate layout.*matched: cuDNN's; the same again"):
        choose_layouts(str(source), "serving_default", unknown, source_outputs)  # two that compute alike: refused


@pytest.mark.parametrize("mode,keras,built", [("lstm", "ifco", "ifoc"), ("gru", "zrh", "zrh")])
def test_candidate_layouts_gather_the_other_build_into_cudnns(mode, keras, built):
    """Each candidate that is not cuDNN's own gathers params built gate by gate in the other build's order (written
    out here in NumPy from Keras-shaped weights: W_g = kernel's gate-g columns transposed) into cuDNN's layout."""
    from cudnn_port.graphs.layouts import candidates
    from cudnn_port.layout import RNNSpec

    I, H = 5, 3
    spec = RNNSpec(mode=mode, num_layers=1, num_units=H, input_size=I)
    cudnn = "ifco" if mode == "lstm" else "rzh"
    rng = np.random.default_rng(7)
    kernel, recurrent, b_W, b_R = (rng.normal(size=s) * 0.3 for s in [(I, len(keras) * H), (H, len(keras) * H),
                                                                        (len(keras) * H,), (len(keras) * H,)])

    def params(order):
        gate = lambda m, g: m[..., keras.index(g) * H:(keras.index(g) + 1) * H]
        return np.concatenate([gate(kernel, g).T.ravel() for g in order] + [gate(recurrent, g).T.ravel() for g in order]
                              + [gate(b_W, g) for g in order] + [gate(b_R, g) for g in order])

    found = candidates(spec)
    assert [perm is None for perm in found.values()] == [True, False], list(found)
    [perm] = [p for p in found.values() if p is not None]
    assert params(cudnn).size == spec.param_count
    np.testing.assert_array_equal(params(built)[perm], params(cudnn))
    assert not np.array_equal(params(built), params(cudnn))  # the two layouts differ: the choice means something
