"""CPU exports (SavedModel, frozen GraphDef, ONNX) against the NumPy reference, plus verify and bench.

Each artifact is loaded the way its users load it (tf.saved_model.load, import_graph_def in a TF1 session,
an onnxruntime session) and compared with reference.forward on ragged batches (lengths 1 .. T) with
non-zero initial states, within ATOL_FP32.
"""
import json
import os
import shutil

import numpy as np
import pytest

from helpers import CONFIGS, CONFIG_IDS, SAMPLE_SPEC, assert_all_close, assert_close, make_spec, ragged_batch, \
    random_blob, spec_flags, write_source
from cudnn_port import cli, deps, reference
from cudnn_port import convert
from cudnn_port.exports.tensorflow import op_types
from cudnn_port.layout import unpack

tf = pytest.importorskip("tensorflow")
ort = pytest.importorskip("onnxruntime")
EXPORTS = ["saved_model", "graphdef", "onnx_stateful"]  # the artifacts that take states
STATES = ("outputs", "final_h", "final_c")  # the artifacts' output names


def feeds(spec, x, lengths, h_0, c_0):
    out = {"inputs": x, "sequence_lengths": lengths, "initial_h": h_0}
    if spec.mode == "lstm":
        out["initial_c"] = c_0
    return out


_LOADED = {}  # the latest artifact loaded, by path: a test that runs one artifact step by step loads it once


def _latest(path, load):
    if str(path) not in _LOADED:
        for old in _LOADED.values():  # only the latest: the tests read one artifact at a time
            if isinstance(old, tf.compat.v1.Session):
                old.close()
        _LOADED.clear()
        _LOADED[str(path)] = load(str(path))
    return _LOADED[str(path)]


def load_saved_model(path):
    return _latest(path, tf.saved_model.load)


def graphdef_session(path):
    """A TF1 session over the frozen GraphDef at ``path``, imported as its users import it."""
    def load(path):
        graph_def = tf.compat.v1.GraphDef()
        graph_def.ParseFromString(open(path, "rb").read())
        graph = tf.Graph()
        with graph.as_default():
            tf.compat.v1.import_graph_def(graph_def, name="")
        return tf.compat.v1.Session(graph=graph)

    return _latest(path, load)


def run_saved_model(path, spec, batch, signature="with_initial_state"):
    fn = load_saved_model(path).signatures[signature]
    result = fn(**{k: tf.constant(v) for k, v in batch.items()})
    return [result["outputs"].numpy(), result["final_h"].numpy()] + (
        [result["final_c"].numpy()] if spec.mode == "lstm" else [None])


def run_graphdef(path, spec, batch):
    names = ["outputs:0", "final_h:0"] + (["final_c:0"] if spec.mode == "lstm" else [])
    got = graphdef_session(path).run(names, {f"{k}:0": v for k, v in batch.items()})
    return got + ([None] if spec.mode == "gru" else [])


def run_onnx(path, spec, batch):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = ["outputs", "final_h"] + (["final_c"] if spec.mode == "lstm" else [])
    return session.run(names, batch) + ([None] if spec.mode == "gru" else [])


RUNNERS = {"saved_model": run_saved_model, "graphdef": run_graphdef, "onnx_stateful": run_onnx, "onnx": run_onnx}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Convert one checkpoint per config once; yield {config: (spec, blob, out_dir, manifest)}."""
    made = {}
    for mode, layers, bi in CONFIGS:
        spec = make_spec(mode, layers, bi)
        tmp = tmp_path_factory.mktemp(f"{mode}{layers}{bi}")
        src, blob = write_source(tmp, spec, name=f"cudnn_{mode}/opaque_kernel", seed=layers + 3 * bi)
        manifest = convert(src, tmp / "out", **spec_flags(spec))
        made[(mode, layers, bi)] = (spec, blob, tmp / "out", manifest)
    return made


@pytest.mark.slow
@pytest.mark.parametrize("artifact", EXPORTS)
@pytest.mark.parametrize("mode,layers,bi", CONFIGS, ids=CONFIG_IDS)
def test_export_matches_reference(exported, mode, layers, bi, artifact):
    spec, blob, out, manifest = exported[(mode, layers, bi)]
    x, lengths, h_0, c_0 = ragged_batch(spec)
    want = reference.forward(unpack(spec, blob), x, lengths, h_0, c_0)
    path = out / manifest["stacks"][0]["artifacts"][artifact]
    got = RUNNERS[artifact](path, spec, feeds(spec, x, lengths, h_0, c_0))
    assert_all_close(got, want, artifact, STATES)


@pytest.mark.slow
@pytest.mark.parametrize("mode,layers,bi", [c for c in CONFIGS if c[1] == 2], ids=lambda v: str(v))
def test_optional_states_default_to_zero(exported, mode, layers, bi):
    spec, blob, out, manifest = exported[(mode, layers, bi)]
    x, lengths, _, _ = ragged_batch(spec)
    want = reference.forward(unpack(spec, blob), x, lengths)
    arts = manifest["stacks"][0]["artifacts"]
    got = run_saved_model(out / arts["saved_model"], spec, {"inputs": x, "sequence_lengths": lengths},
                          signature="serving_default")
    assert_all_close(got, want, "saved_model serving_default", STATES)
    got = run_graphdef(out / arts["graphdef"], spec, {"inputs": x, "sequence_lengths": lengths})
    assert_all_close(got, want, "graphdef with initial states left out", STATES)
    got = run_onnx(out / arts["onnx"], spec, {"inputs": x, "sequence_lengths": lengths})  # takes no states at all
    assert_all_close(got, want, "model.onnx", STATES)


@pytest.mark.slow
@pytest.mark.parametrize("artifact", EXPORTS)
@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_single_step_use_for_decoding(exported, mode, artifact):
    """T = 1 with states passed in and out, repeated, equals one run over the whole sequence."""
    spec, blob, out, manifest = exported[(mode, 2, False)]
    x, _, h_0, c_0 = ragged_batch(spec)
    full = np.full(len(x), x.shape[1], np.int32)
    want = reference.forward(unpack(spec, blob), x, full, h_0, c_0)
    run = RUNNERS[artifact]
    path = out / manifest["stacks"][0]["artifacts"][artifact]
    h, c, steps = h_0, c_0, []
    for t in range(x.shape[1]):
        y, h, c_new = run(path, spec, feeds(spec, x[:, t:t + 1], np.ones(len(x), np.int32), h, c))
        c = c_new if c_new is not None else c
        steps.append(y)
    assert_close(np.concatenate(steps, axis=1), want[0], f"{artifact} stepped outputs")
    assert_close(h, want[1], f"{artifact} stepped final_h")
    if mode == "lstm":
        assert_close(c, want[2], f"{artifact} stepped final_c")


@pytest.mark.slow
@pytest.mark.parametrize("mode,layers,bi", CONFIGS, ids=CONFIG_IDS)
def test_no_cudnn_op_and_fused_onnx_nodes(exported, mode, layers, bi):
    import onnx
    from tensorflow.core.protobuf import saved_model_pb2

    spec, _, out, manifest = exported[(mode, layers, bi)]
    arts = manifest["stacks"][0]["artifacts"]
    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString((out / arts["saved_model"] / "saved_model.pb").read_bytes())
    graph_def = tf.compat.v1.GraphDef()
    graph_def.ParseFromString((out / arts["graphdef"]).read_bytes())
    for name, ops in (("saved_model", set().union(*(op_types(m.graph_def) for m in saved.meta_graphs))),
                      ("graphdef", op_types(graph_def))):
        assert not [op for op in ops if "cudnn" in op.lower()], f"{name} has cuDNN ops: {ops}"
        assert ops & {"While", "StatelessWhile"}, f"{name}: expected the time loop, got {sorted(ops)}"
        assert not [op for op in ops if op in ("VarHandleOp", "VariableV2", "ReadVariableOp")], f"{name} not frozen"
    for key in ("onnx", "onnx_stateful"):  # LSTM: a forward node per layer and direction; GRU: one per layer
        model = onnx.load(str(out / arts[key]))
        kinds = [n.op_type for n in model.graph.node]
        assert kinds.count(mode.upper()) == layers * (2 if bi and mode == "lstm" else 1), kinds
        assert not {"Loop", "Scan", "If"} & set(kinds), kinds
        assert model.ir_version <= 13
        rnn = [n for n in model.graph.node if n.op_type == mode.upper()]
        producer = {out: n for n in model.graph.node for out in n.output}

        def source_of(name):  # through the empty-input guard (Pad, Add of constants) back to a graph input
            while name in producer:
                name = producer[name].input[0]
            return name

        assert all(source_of(n.input[4]) == "sequence_lengths" for n in rnn)
        if mode == "gru":
            assert all(any(a.name == "linear_before_reset" and a.i == 1 for a in n.attribute) for n in rnn)
    graph_nodes = manifest["stacks"][0]["graphdef_nodes"]
    assert graph_nodes["outputs"][:2] == ["outputs:0", "final_h:0"] and graph_nodes["inputs"][0] == "inputs:0"


@pytest.mark.slow
def test_dynamic_batch_and_time_in_onnx(exported):
    spec, blob, out, manifest = exported[("gru", 1, True)]
    for batch, steps in ((1, 1), (3, 11)):
        x = np.random.default_rng(batch).normal(size=(batch, steps, spec.input_size)).astype(np.float32)
        lengths = np.full(batch, steps, np.int32)
        got = run_onnx(out / manifest["stacks"][0]["artifacts"]["onnx"], spec,
                       {"inputs": x, "sequence_lengths": lengths})
        assert_close(got[0], reference.forward(unpack(spec, blob), x)[0], f"onnx batch {batch} time {steps}")



def _xla_functions(saved_model_dir):
    """Names of the SavedModel's library functions marked for XLA compilation."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString((saved_model_dir / "saved_model.pb").read_bytes())
    return [f.signature.name for m in saved.meta_graphs for f in m.graph_def.library.function
            if f.attr["_XlaMustCompile"].b]


def test_padded_steps_buckets():
    from cudnn_port.exports.tensorflow import STEP_BUCKETS, padded_steps

    top = STEP_BUCKETS[-1]
    for steps in list(range(1, 260)) + [383, 384, 385, 1023, 1024, 1025, 2048, 2049, 5000]:
        want = next((b for b in STEP_BUCKETS if b >= steps), -(-steps // top) * top)
        assert int(padded_steps(tf, tf.constant(steps))) == want, steps


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_xla_saved_model_stops_at_the_longest_sequence(tmp_path, mode, capsys):
    """convert --xla (opt-in): every length < T (and T off a bucket): the loops stop early and the steps they skip
    must read as zeros."""
    spec = make_spec(mode, 2, True)
    src, blob = write_source(tmp_path, spec, name=f"cudnn_{mode}/opaque_kernel", seed=5)
    code = cli.main(["convert", str(src), str(tmp_path / "out"), "--formats", "saved_model", "--xla", "--json",
                     "--quiet"] + spec.flags().split())
    manifest = json.loads(capsys.readouterr().out)
    out = tmp_path / "out"
    assert code == 0 and manifest["saved_model_xla"] is True
    assert _xla_functions(out / manifest["stacks"][0]["artifacts"]["saved_model"])
    rng = np.random.default_rng(5)
    for steps, lengths in ((13, [9, 1, 4]), (33, [30, 17, 2]), (1, [1, 1, 1])):
        x = rng.normal(size=(3, steps, spec.input_size)).astype(np.float32)
        lengths = np.asarray(lengths, np.int32)
        h_0, c_0 = (rng.normal(size=(2, spec.num_pseudo_layers, 3, spec.num_units)) * 0.5).astype(np.float32)
        want = reference.forward(unpack(spec, blob), x, lengths, h_0, c_0)
        got = run_saved_model(out / manifest["stacks"][0]["artifacts"]["saved_model"], spec,
                              feeds(spec, x, lengths, h_0, c_0))
        assert got[0].shape == want[0].shape
        assert_all_close(got, want, f"T={steps}", STATES)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_default_saved_model_has_no_xla_function(tmp_path, mode, capsys):
    """The default SavedModel is plain ops (TF Serving with default flags, TF Java and the C API run it): no function
    is marked for XLA compilation, and the numbers are the reference's."""
    spec = make_spec(mode, 2, True)
    src, blob = write_source(tmp_path, spec, name=f"cudnn_{mode}/opaque_kernel", seed=11)
    code = cli.main(["convert", str(src), str(tmp_path / "out"), "--formats", "saved_model", "--json", "--quiet"]
                    + spec.flags().split())
    manifest = json.loads(capsys.readouterr().out)
    assert code == 0 and manifest["saved_model_xla"] is False
    path = tmp_path / "out" / manifest["stacks"][0]["artifacts"]["saved_model"]
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString((path / "saved_model.pb").read_bytes())
    functions = [f for m in saved.meta_graphs for f in m.graph_def.library.function]
    assert functions and _xla_functions(path) == []
    x, lengths, h_0, c_0 = ragged_batch(spec)
    want = reference.forward(unpack(spec, blob), x, lengths, h_0, c_0)
    got = run_saved_model(path, spec, feeds(spec, x, lengths, h_0, c_0))
    assert_all_close(got, want, "plain saved_model", STATES)

# ---------------------------------------------------------------------------------------------------- verify

@pytest.fixture(scope="module")
def sample_out(tmp_path_factory):
    """The sample checkpoint (what the tf1_ckpt fixture writes) converted to every default format once: its out
    folder. A test that verifies, benches or changes it works on its own copy (verify writes parity.json)."""
    from make_tf1_checkpoint import sample_variables, save_tf1

    tmp = tmp_path_factory.mktemp("sample")
    convert(save_tf1(str(tmp / "src" / "model.ckpt"), sample_variables(seed=3)), tmp / "out")
    return tmp / "out"


@pytest.mark.slow
def test_verify_passes_writes_report_and_catches_a_broken_artifact(tmp_path, sample_out, capsys):
    out = tmp_path / "out"
    shutil.copytree(sample_out, out)
    code = cli.main(["verify", str(out), "--json", "--quiet"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["passed"]
    artifacts = {r["artifact"] for r in report["rows"] if r["passed"]}
    runtimes = ["onnxruntime"] + (["openvino"] if deps.available("openvino") else [])
    assert artifacts == {"files (sha256)", "checkpoint (tf1 style)", "checkpoint (copied variables)"} | {
        f"{artifact}, {fed}" for artifact in ("saved_model (signatures)", "saved_model (functions)",
                                              "graphdef (session)")
        for fed in ("states fed", "no states")} | {
        f"{key} ({r})" for key in ("onnx", "onnx_stateful") for r in runtimes}
    assert json.loads((out / "parity.json").read_text())["passed"] is True
    assert all(r["judge"] == "source buffer" for r in report["rows"] if r["stack"] == "cudnn_lstm/opaque_kernel"
               and r["passed"] is not None)
    # Replace the ONNX file with one holding other weights: verify must fail, exit 1, and name the artifact.
    from cudnn_port.exports.onnx import write_onnx

    write_onnx(unpack(SAMPLE_SPEC, random_blob(SAMPLE_SPEC, seed=99)), out / "model.onnx")
    code = cli.main(["verify", str(out), "--quiet"])
    text = capsys.readouterr().out
    assert code == 1 and "FAILED" in text
    assert [line for line in text.splitlines() if "onnx" in line and "FAIL" in line]


def test_verify_on_a_foreign_folder_is_a_clean_error(tmp_path, capsys):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "manifest.json").write_text('{"tool": "other"}')
    for folder in (tmp_path / "x", tmp_path / "missing"):
        code = cli.main(["verify", str(folder)])
        err = capsys.readouterr().err
        assert code == 2 and "not a cudnn-port output" in err and "Traceback" not in err


@pytest.mark.slow
def test_verify_falls_back_to_the_converted_checkpoint(tmp_path, tf1_ckpt):
    """With the source gone, the stack rows can only agree with OUT/checkpoint, the conversion's own output: not a
    judge. They fail unless the user accepts unjudged rows, and then they are not judged, never passed."""
    from cudnn_port.verify import verify

    out = tmp_path / "out"
    convert(tf1_ckpt, out, formats=["checkpoint", "onnx"])
    for f in os.listdir(os.path.dirname(tf1_ckpt)):
        os.remove(os.path.join(os.path.dirname(tf1_ckpt), f))
    assert not verify(out)["passed"]
    report = verify(out, allow_unjudged=True)
    stack_rows = [r for r in report["rows"] if r["stack"] == "cudnn_lstm/opaque_kernel" and r.get("unjudged")]
    assert report["passed"] and stack_rows and all(r["judge"].startswith("converted checkpoint") and
                                                   r["passed"] is None for r in stack_rows)


@pytest.mark.slow
def test_parity_marker_in_a_users_suite(tmp_path, tf1_ckpt, pytester):
    out = tmp_path / "out"
    convert(tf1_ckpt, out, formats=["checkpoint", "onnx"])
    pytester.makepyfile(f"""
        import pytest

        @pytest.mark.parity({str(out)!r}, atol=1e-5)
        def test_export(parity_report):
            assert parity_report["passed"]
            assert any(r["artifact"].startswith("onnx") for r in parity_report["rows"])
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")  # the plugin loads by its entry point
    result.assert_outcomes(passed=1)


@pytest.mark.slow
def test_bench_reports_each_artifact_at_batch_1_and_32(tmp_path, sample_out, capsys):
    out = tmp_path / "out"
    shutil.copytree(sample_out, out)
    code = cli.main(["bench", str(out), "--steps", "4", "--repeat", "1", "--json", "--quiet"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    cases = {(r["artifact"], r["batch"]) for r in report["rows"]}
    onnx_rows = [f"{key} ({r})" for key in ("onnx", "onnx_stateful") for r in ("onnxruntime", "openvino")] \
        if deps.available("openvino") else ["onnx", "onnx_stateful"]
    assert cases == {(a, b) for a in ["saved_model", "graphdef"] + onnx_rows for b in (1, 32)}
    assert all(r["latency_ms"] > 0 and r["steps"] == 4 for r in report["rows"])


@pytest.mark.gpu
def test_verify_gpu_row_runs_cudnn_with_tf32_off(tmp_path, tf1_ckpt):
    """Where TensorFlow sees a GPU, verify's GPU row runs the fused op on the source buffer with TF32 off, within the
    fp32 floor; a wrong reference (here a swapped gate order in the judge's weights) fails it."""
    if not tf.config.list_logical_devices("GPU"):
        pytest.skip("TensorFlow sees no GPU")
    from cudnn_port.judging.stack_rows import gpu_row
    from cudnn_port.layout import RNNSpec
    from cudnn_port.verify import verify

    out = tmp_path / "out"
    convert(tf1_ckpt, out, formats=["checkpoint"])
    row = [r for r in verify(out)["rows"] if r["artifact"].startswith("cudnn (GPU")][0]
    assert row["passed"] is True and "TF32 off" in row["note"], row
    spec = RNNSpec("lstm", 2, 48, 32, True)
    canon = unpack(spec, random_blob(spec, seed=3))
    x, lengths, h, c = ragged_batch(spec)
    want = list(reference.forward(canon, x, lengths, h, c))
    swapped = unpack(spec, random_blob(spec, seed=3))
    for p in swapped.layers:
        p.W[[1, 2]] = p.W[[2, 1]]
    assert gpu_row(spec, swapped, (x, lengths, h, c), want, 1e-5, 1e-4)["passed"] is False


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_stack_saved_model_and_graphdef_refuse_lengths_outside_one_to_steps(tmp_path, mode):
    """Like the stack's ONNX and TFLite files, its SavedModel (both signatures) and frozen GraphDef end a call with a
    length of 0 or of steps + 1 in a catchable InvalidArgumentError naming the guard (TF Serving answers
    INVALID_ARGUMENT); lengths 1 and steps, and an empty batch, still run, and the former match the reference."""
    from cudnn_port.exports.tensorflow import LENGTHS_GUARD, write_frozen_graph, write_saved_model

    spec = make_spec(mode, 2, True, input_size=4, hidden=3)
    canon = unpack(spec, random_blob(spec, seed=66))
    x, _, h_0, c_0 = ragged_batch(spec, batch=4, steps=5, seed=67)
    write_saved_model(canon, str(tmp_path / "sm"))
    loaded = tf.saved_model.load(str(tmp_path / "sm"))
    info = write_frozen_graph(canon, str(tmp_path / "g.pb"))
    graph_def = tf.compat.v1.GraphDef()
    graph_def.ParseFromString((tmp_path / "g.pb").read_bytes())
    frozen = tf.compat.v1.wrap_function(lambda: tf.compat.v1.import_graph_def(graph_def, name=""), [])
    runs = {"serving_default": lambda f: loaded.signatures["serving_default"](
                inputs=f["inputs"], sequence_lengths=f["sequence_lengths"]),
            "with_initial_state": lambda f: loaded.signatures["with_initial_state"](**f),
            "graphdef": lambda f: dict(zip(STATES, frozen.prune(
                [frozen.graph.get_tensor_by_name(n) for n in info["inputs"]],
                [frozen.graph.get_tensor_by_name(n) for n in info["outputs"]])(*f.values())))}
    for name, run in runs.items():
        good = np.array([5, 1, 3, 5], np.int32)
        got = run({k: tf.constant(v) for k, v in feeds(spec, x, good, h_0, c_0).items()})
        states = name != "serving_default"
        want = reference.forward(canon, x, good, h_0 if states else None, c_0 if states and mode == "lstm" else None)
        for key, value in zip(STATES, want):
            if value is not None:
                assert_close(got[key], value, f"{name} {key}", 1e-5)
        empty = {k: v[:, :0] if k.startswith("initial") else v[:0] for k, v in feeds(spec, x, good, h_0, c_0).items()}
        assert run({k: tf.constant(v) for k, v in empty.items()})["outputs"].shape[0] == 0
        for bad in (0, 6):
            lengths = np.array([5, bad, 3, 1], np.int32)
            with pytest.raises(tf.errors.InvalidArgumentError) as caught:
                run({k: tf.constant(v) for k, v in feeds(spec, x, lengths, h_0, c_0).items()})
            assert LENGTHS_GUARD in str(caught.value), (name, bad, str(caught.value)[:300])
