"""The two ONNX models of a stack in every runtime users deploy them to: model.onnx takes exactly ``inputs`` and
``sequence_lengths``, model_stateful.onnx the states as required inputs, neither lists an initializer as an input,
onnxruntime logs no warning loading them, and both match the float64 reference on ragged batches (lengths 1 .. T,
non-zero states) in onnxruntime and in OpenVINO (f32), on stacks none of the other tests use (held-out seeds and
sizes). OpenVINO tests skip when it is not installed.

Tolerance: ATOL_FP32 (1e-5), the fp32 bound every artifact meets (measured ~2e-7 here)."""
import numpy as np
import pytest

from helpers import ATOL_FP32, make_spec, random_canon
from cudnn_port import reference
from cudnn_port.exports.onnx import build_model, write_onnx

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
HELD_OUT = [("lstm", 1, False, 9, 4), ("lstm", 3, True, 5, 8), ("gru", 2, True, 11, 3), ("gru", 3, False, 4, 7)]
IDS = [f"{m}-L{n}-{'bi' if b else 'uni'}-I{i}-H{h}" for m, n, b, i, h in HELD_OUT]


@pytest.fixture(params=HELD_OUT, ids=IDS)
def stack(request, tmp_path):
    mode, layers, bi, inputs, hidden = request.param
    canon = random_canon(make_spec(mode, layers, bi, input_size=inputs, hidden=hidden), seed=100 + layers)
    for name, states in (("model.onnx", False), ("model_stateful.onnx", True)):
        write_onnx(canon, tmp_path / name, states=states)
    return canon, tmp_path


def ragged(spec, seed=7):
    rng = np.random.default_rng(seed)
    lengths = np.array([9, 2, 6, 1], np.int32)
    x = rng.normal(size=(4, 9, spec.input_size)).astype(np.float32)
    shape = (spec.num_pseudo_layers, 4, spec.num_units)
    states = {"initial_h": (rng.normal(size=shape) * 0.5).astype(np.float32)}
    if spec.mode == "lstm":
        states["initial_c"] = (rng.normal(size=shape) * 0.5).astype(np.float32)
    return {"inputs": x, "sequence_lengths": lengths}, states


def assert_matches(got, want, what):
    for name, g, w in zip(("outputs", "final_h", "final_c"), got, want):
        if w is not None:
            np.testing.assert_allclose(g, w, atol=ATOL_FP32, err_msg=f"{what} {name}")


def both_models(canon, folder, opener):
    """Run model.onnx without states and model_stateful.onnx with them through ``opener(path, spec) -> run``;
    check each against the reference."""
    plain, states = ragged(canon.spec)
    want_zero = reference.forward(canon, plain["inputs"], plain["sequence_lengths"])
    want = reference.forward(canon, plain["inputs"], plain["sequence_lengths"], states["initial_h"],
                             states.get("initial_c"))
    assert_matches(opener(folder / "model.onnx", canon.spec)(plain), want_zero, "model.onnx")
    assert_matches(opener(folder / "model_stateful.onnx", canon.spec)(dict(plain, **states)), want,
                   "model_stateful.onnx")


def test_inputs_are_real_inputs_and_metadata_names_the_states(stack):
    canon, folder = stack
    want = {"model.onnx": ["inputs", "sequence_lengths"],
            "model_stateful.onnx": ["inputs", "sequence_lengths", "initial_h"] + (
                ["initial_c"] if canon.spec.mode == "lstm" else [])}
    for name, inputs in want.items():
        model = onnx.load(str(folder / name))
        assert [i.name for i in model.graph.input] == inputs
        assert not {i.name for i in model.graph.initializer} & set(inputs), "an initializer is also an input"
        session = ort.InferenceSession(str(folder / name), providers=["CPUExecutionProvider"])
        assert [i.name for i in session.get_inputs()] == inputs  # all required: onnxruntime lists them all
        meta = session.get_modelmeta().custom_metadata_map
        assert meta["state_outputs"] == ",".join(["final_h", "final_c"][:1 + (canon.spec.mode == "lstm")])
        assert meta["state_inputs"] == ",".join(inputs[2:])
        assert meta["state_shape"] == f"{canon.spec.num_pseudo_layers},batch,{canon.spec.num_units}"


@pytest.mark.parametrize("level", [0, 1, 2])
def test_onnxruntime_logs_no_warning_at_load(stack, capfd, level):
    _, folder = stack
    for name in ("model.onnx", "model_stateful.onnx"):
        options = ort.SessionOptions()
        options.log_severity_level = level
        ort.InferenceSession(str(folder / name), options, providers=["CPUExecutionProvider"])
    err = capfd.readouterr().err
    assert not [line for line in err.splitlines() if "[W:" in line or "[E:" in line], err


def onnxruntime_opener(path, spec):
    """The ONNX format's onnxruntime runtime as ``opener(path, spec) -> run`` returning [outputs, final_h, final_c]."""
    from cudnn_port.exports import OUTPUT_NAMES
    from cudnn_port.formats.jobs import StackJob
    from cudnn_port.formats.onnx import _open_onnxruntime

    run = _open_onnxruntime(path, StackJob(spec))
    return lambda feeds: run(feeds).ordered(OUTPUT_NAMES)


def test_onnxruntime_matches_the_reference_on_ragged_batches(stack):
    both_models(*stack, onnxruntime_opener)


def test_openvino_matches_the_reference_on_ragged_batches(stack):
    pytest.importorskip("openvino", reason="OpenVINO is not installed (pip install 'cudnn-port[openvino]')")
    from cudnn_port.exports.openvino import open_onnx

    both_models(*stack, open_onnx)


def test_openvino_computes_the_plain_fused_graph_wrong(tmp_path):
    """Why model.onnx has its portable form: OpenVINO (2026.4) ignores sequence_lens on dynamic shapes, so the plain
    graph (bidirectional nodes, sequence_lens alone doing the ragging) is far off on a ragged batch there, and right
    in onnxruntime. If a later OpenVINO honours sequence_lens, this test says so."""
    pytest.importorskip("openvino", reason="OpenVINO is not installed (pip install 'cudnn-port[openvino]')")
    from cudnn_port.exports.openvino import open_onnx
    canon = random_canon(make_spec("lstm", 2, True, input_size=9, hidden=4), seed=11)
    (tmp_path / "plain.onnx").write_bytes(build_model(canon, states=True, portable=False).SerializeToString())
    plain, states = ragged(canon.spec)
    feeds = dict(plain, **states)
    want = reference.forward(canon, plain["inputs"], plain["sequence_lengths"], states["initial_h"],
                             states["initial_c"])
    assert_matches(onnxruntime_opener(tmp_path / "plain.onnx", canon.spec)(feeds), want, "plain graph, onnxruntime")
    got = open_onnx(tmp_path / "plain.onnx", canon.spec)(feeds)
    assert max(float(np.abs(g - w).max()) for g, w in zip(got, want)) > 1e-2


def test_openvino_runs_in_f32_and_takes_the_states(stack):
    pytest.importorskip("openvino", reason="OpenVINO is not installed (pip install 'cudnn-port[openvino]')")
    from cudnn_port.exports.openvino import compile_onnx

    canon, folder = stack
    compiled = compile_onnx(folder / "model_stateful.onnx")
    assert str(compiled.get_property("INFERENCE_PRECISION_HINT")).lower() in ("<type: 'float32'>", "f32")
    want = ["inputs", "sequence_lengths", "initial_h"] + (["initial_c"] if canon.spec.mode == "lstm" else [])
    assert len(compiled.inputs) == len(want)  # the states are inputs, not folded into constants
    assert all(name in port.get_names() for name, port in zip(want, compiled.inputs))


EMPTY_PROBE = """
import json, sys
import numpy as np
import onnxruntime as ort
try:
    import openvino
except ImportError:
    openvino = None
results = []
for path in sys.argv[1:]:
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    compiled = openvino.Core().compile_model(path, "CPU") if openvino else None
    for batch, steps in ((0, 5), (3, 0)):
        feeds = {}
        for i in session.get_inputs():
            dims = [batch if d == "batch" else steps if d == "time" else d for d in i.shape]
            dtype = np.int32 if "int32" in i.type else np.float32
            feeds[i.name] = np.full(dims, steps, dtype) if i.name == "sequence_lengths" else np.ones(dims, dtype)
        row = {"path": path, "batch": batch, "steps": steps}
        for name, run in (("onnxruntime", lambda: session.run(None, feeds)),
                          ("openvino", compiled and (lambda: list(compiled(feeds).values())))):
            if run is None:
                continue
            try:
                row[name] = [list(np.shape(v)) for v in run()]
            except Exception as e:
                row[name] = "error: " + " ".join(str(e).split())[:400]
        results.append(row)
print(json.dumps(results))
"""


def run_empty_probe(paths):
    """Each ONNX model at ``paths`` run on an empty batch (0 x 5 steps) and on zero steps (3 x 0) in onnxruntime
    (and OpenVINO where installed), in a child process: [{path, batch, steps, runtime: output shapes or
    "error: ..."}]. The child must end by itself: onnxruntime 1.31.1 aborted it (SIGABRT) on either."""
    import json
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", EMPTY_PROBE, *map(str, paths)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_an_empty_batch_or_zero_steps_never_ends_the_process(tmp_path):
    """onnxruntime 1.31.1 ends the process (SIGABRT, nothing to catch) on an LSTM or GRU node of an empty batch, or
    a GRU of zero steps without sequence_lens. Every held-out stack's model.onnx and model_stateful.onnx (LSTM and
    GRU, one to three layers, both directions, input size != hidden) gives empty outputs of the right shapes for an
    empty batch, and for zero steps a catchable error naming the guard, in onnxruntime and OpenVINO."""
    from cudnn_port.exports.onnx_guard import TIME_GUARD

    paths, specs = [], {}
    for mode, layers, bi, inputs, hidden in HELD_OUT:
        canon = random_canon(make_spec(mode, layers, bi, input_size=inputs, hidden=hidden), seed=200 + layers)
        for states in (False, True):
            path = tmp_path / f"{mode}{layers}{bi}{states}.onnx"
            write_onnx(canon, path, states=states)
            paths.append(path)
            specs[str(path)] = canon.spec
    rows = run_empty_probe(paths)
    assert len(rows) == 2 * len(paths)
    for row in rows:
        spec = specs[row["path"]]
        state = [spec.num_pseudo_layers, 0, spec.num_units]
        want = [[0, 5, spec.num_dirs * spec.num_units]] + [state] * (2 if spec.mode == "lstm" else 1)
        for runtime in ("onnxruntime", "openvino"):
            if runtime not in row:
                continue
            if row["batch"] == 0:
                assert row[runtime] == want, row
            else:
                assert row[runtime].startswith("error:") and TIME_GUARD in row[runtime], row


@pytest.mark.slow
def test_a_whole_model_onnx_survives_an_empty_batch_and_zero_steps(tmp_path):
    """A Keras model of a bidirectional LSTM and an unmasked GRU (its fused node has no sequence_lens: onnxruntime's
    GRU aborted on zero steps too), saved and converted: model.onnx gives empty outputs for an empty batch and a
    catchable error naming the guard for zero steps, in a child process that ends by itself; on a batch it still
    matches Keras."""
    keras = pytest.importorskip("keras")
    from cudnn_port import convert
    from cudnn_port.exports.onnx_guard import TIME_GUARD

    L = keras.layers
    x = keras.Input((None, 5), name="x")
    model = keras.Model(x, L.Dense(3)(L.GRU(4)(L.Bidirectional(L.LSTM(6, return_sequences=True))(x))))
    rng = np.random.default_rng(8)
    model.set_weights([(rng.normal(size=w.shape) * 0.4).astype(w.dtype) for w in model.get_weights()])
    model.save(tmp_path / "m.keras")
    convert(tmp_path / "m.keras", tmp_path / "out", formats=["onnx"])
    path = tmp_path / "out" / "model.onnx"
    for row in run_empty_probe([path]):
        for runtime in ("onnxruntime", "openvino"):
            if runtime in row:
                ok = row[runtime] == [[0, 3]] if row["batch"] == 0 else TIME_GUARD in row[runtime]
                assert ok, row
    batch = rng.normal(size=(2, 7, 5)).astype(np.float32)
    got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": batch})[0]
    np.testing.assert_allclose(got, np.asarray(model(batch)), atol=1e-5, rtol=1e-4)


@pytest.mark.slow
def test_a_whole_model_onnx_sliced_in_front_of_a_widening_head_survives_an_empty_batch(tmp_path):
    """Masking -> two bidirectional LSTM layers (input 5, 6 units) -> GRU(7) at every step -> Dense(40): the guard
    slices the rows back in front of the Dense's MatMul (7 values a step copied, not 40), and model.onnx still gives
    an empty output for an empty batch and a catchable error for zero steps in a child process, in onnxruntime and
    OpenVINO, and matches Keras on a ragged batch."""
    keras = pytest.importorskip("keras")
    import onnx

    from cudnn_port import convert
    from cudnn_port.exports.onnx_guard import PREFIX, TIME_GUARD

    L = keras.layers
    x = keras.Input((None, 5), name="x")
    y = L.Bidirectional(L.LSTM(6, return_sequences=True))(L.Bidirectional(L.LSTM(6, return_sequences=True))(
        L.Masking()(x)))
    model = keras.Model(x, L.Dense(40)(L.GRU(7, return_sequences=True)(y)))
    rng = np.random.default_rng(9)
    model.set_weights([(rng.normal(size=w.shape) * 0.4).astype(w.dtype) for w in model.get_weights()])
    model.save(tmp_path / "m.keras")
    convert(tmp_path / "m.keras", tmp_path / "out", formats=["onnx"])
    path = tmp_path / "out" / "model.onnx"
    graph = onnx.load(str(path)).graph
    rows = next(n for n in graph.node if n.name == f"{PREFIX}output_0/rows")
    readers = [n.op_type for n in graph.node if rows.output[0] in n.input]
    assert rows.output[0] != "output_0" and readers == ["MatMul"], (rows, readers)
    for row in run_empty_probe([path]):
        for runtime in ("onnxruntime", "openvino"):
            if runtime in row:
                ok = row[runtime] == [[0, 5, 40]] if row["batch"] == 0 else TIME_GUARD in row[runtime]
                assert ok, row
    batch = rng.normal(size=(3, 8, 5)).astype(np.float32)
    batch[1, 3:], batch[2, 6:] = 0, 0  # ragged: lengths 8, 3, 6 (Masking skips the all-zero steps)
    got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": batch})[0]
    np.testing.assert_allclose(got, np.asarray(model(batch)), atol=1e-5, rtol=1e-4)


LITE_PROBE = """
import json, sys
import numpy as np
from ai_edge_litert.interpreter import Interpreter
feeds = np.load(sys.argv[1])
results = []
for path in sys.argv[2:]:
    stateful = "stateful" in path
    for batch, steps in ((0, 5), (0, 0), (4, 9)):
        given = {k: v[:batch, :steps] if k == "inputs" else v[:batch] if k == "sequence_lengths" else v[:, :batch]
                 for k, v in feeds.items() if stateful or not k.startswith("initial")}
        row = {"path": path, "batch": batch, "steps": steps}
        try:
            out = Interpreter(path).get_signature_runner("serving_default")(**given)
            row["litert"] = {k: v.tolist() for k, v in out.items()}
        except Exception as e:
            row["litert"] = "error: " + " ".join(str(e).split())[:400]
        results.append(row)
print(json.dumps(results))
"""


def test_an_empty_batch_in_a_stacks_tflite_is_a_catchable_error(tmp_path):
    """LiteRT 2.3 ended the process (SIGSEGV) on a stack's model.tflite at batch 0. Every held-out stack's
    model.tflite and model_stateful.tflite (LSTM and GRU, one to three layers, both directions, input size !=
    hidden) now fails such a call with a catchable error (the guard's GATHER out of bounds; at 0 steps a GRU's
    loop already fails to prepare), at 5 steps and at 0, in a child process that must end by itself; a ragged batch
    with non-zero states still matches the float64 reference there."""
    import json
    import subprocess
    import sys

    pytest.importorskip("ai_edge_litert.interpreter")
    from cudnn_port.exports.tflite import write_tflite

    paths, canons = [], {}
    for mode, layers, bi, inputs, hidden in HELD_OUT:
        canon = random_canon(make_spec(mode, layers, bi, input_size=inputs, hidden=hidden), seed=400 + layers)
        for stateful in (False, True):
            path = str(tmp_path / f"{mode}{layers}{bi}{'_stateful' if stateful else ''}.tflite")
            write_tflite(canon, path, stateful=stateful)
            paths.append(path)
            canons[path] = canon
    rows = []
    for path in paths:  # each stack its own feeds (sizes differ)
        plain, states = ragged(canons[path].spec)
        np.savez(tmp_path / "feeds.npz", **plain, **states)
        proc = subprocess.run([sys.executable, "-c", LITE_PROBE, str(tmp_path / "feeds.npz"), path],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, (path, proc.returncode, proc.stderr[-2000:])
        rows += json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(rows) == 3 * len(paths)
    for row in rows:
        if row["batch"] == 0:  # the guard's error; a GRU of 0 steps already fails to prepare (also catchable)
            assert isinstance(row["litert"], str) and row["litert"].startswith("error:"), row
            assert "gather index out of bounds" in row["litert"] or row["steps"] == 0, row
            continue
        canon, stateful = canons[row["path"]], row["path"].endswith("_stateful.tflite")
        plain, states = ragged(canon.spec)
        if not stateful:
            states = {}
        want = reference.forward(canon, plain["inputs"], plain["sequence_lengths"], states.get("initial_h"),
                                 states.get("initial_c"))
        got = row["litert"]
        assert_matches([np.asarray(got[k]) if k in got else None for k in ("outputs", "final_h", "final_c")],
                       want, row["path"])


@pytest.mark.parametrize("held_out", [HELD_OUT[1], HELD_OUT[2]], ids=[IDS[1], IDS[2]])
def test_lengths_outside_one_to_steps_are_refused_by_every_runtime(tmp_path, held_out):
    """A stack's ONNX and TFLite files took any length: for length 0 onnxruntime, OpenVINO and LiteRT returned three
    different final states, and past the steps LiteRT's final_h was all zeros. Lengths of 0 and of steps + 1 now
    end in a catchable error in onnxruntime and OpenVINO (where installed), naming the guard, and in LiteRT (its
    GATHER fails out of bounds),
    with or without states; lengths 1 and steps in the same batch still run."""
    from ai_edge_litert.interpreter import Interpreter

    from cudnn_port.exports.onnx_guard import LENGTHS_GUARD
    try:
        import openvino
    except ImportError:
        openvino = None
    from cudnn_port.exports.tflite import write_tflite

    mode, layers, bi, inputs, hidden = held_out
    canon = random_canon(make_spec(mode, layers, bi, input_size=inputs, hidden=hidden), seed=300 + layers)
    feeds, states = ragged(canon.spec)
    runs = {}
    for states_fed in (False, True):
        onnx_path, lite_path = tmp_path / f"m{states_fed}.onnx", tmp_path / f"m{states_fed}.tflite"
        write_onnx(canon, onnx_path, states=states_fed)
        write_tflite(canon, str(lite_path), stateful=states_fed)
        session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
        runner = Interpreter(str(lite_path)).get_signature_runner("serving_default")
        runs[f"onnxruntime{states_fed}"] = (session.run, LENGTHS_GUARD, states_fed)
        runs[f"litert{states_fed}"] = (lambda _, f, r=runner: r(**f), "gather index out of bounds", states_fed)
        if openvino is not None:
            compiled = openvino.Core().compile_model(str(onnx_path), "CPU")
            runs[f"openvino{states_fed}"] = (lambda _, f, c=compiled: c(f), LENGTHS_GUARD, states_fed)
    steps = feeds["inputs"].shape[1]
    for name, (run, needle, states_fed) in runs.items():
        given = dict(feeds, **(states if states_fed else {}))
        run(None, dict(given, sequence_lengths=np.array([1, steps, 2, 3], np.int32)))  # the bounds themselves
        for bad in (0, steps + 1):
            lengths = np.array([steps, bad, 2, 1], np.int32)
            with pytest.raises(Exception) as caught:
                run(None, dict(given, sequence_lengths=lengths))
            assert needle in str(caught.value), (name, bad, str(caught.value)[:300])


ORT_PROBE = """
import json, sys
import numpy as np
import onnxruntime as ort
session = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
results = []
for path in sys.argv[2:]:
    feeds = dict(np.load(path))
    try:
        results.append([v.tolist() for v in session.run(None, feeds)])
    except Exception as e:
        results.append("error: " + " ".join(str(e).split())[:600])
print(json.dumps(results))
"""


@pytest.mark.slow
@pytest.mark.parametrize("held_out", [HELD_OUT[1], HELD_OUT[2]], ids=[IDS[1], IDS[2]])
def test_the_graph_roads_onnx_refuses_an_empty_batch_zero_steps_and_lengths_past_the_steps(tmp_path, held_out):
    """A SavedModel calling CudnnRNNV3 (batch-major, lengths and states fed) converted whole: its model.onnx (fused
    nodes inside tf2onnx's graph, dimensions the signature's) had no guard, and an empty batch ended onnxruntime's
    process (SIGSEGV). Now an empty batch, zero steps and a length past the steps each end in a catchable error from
    the guard in front of the node, in a child process that ends by itself; a ragged batch with non-zero states
    still matches the float64 reference."""
    tf = pytest.importorskip("tensorflow")
    import json
    import subprocess
    import sys

    from helpers import save_params_module
    from cudnn_port import convert
    from cudnn_port.exports.onnx_guard import NODE_GUARD
    from cudnn_port.layout import pack

    mode, layers, bi, inputs, hidden = held_out
    canon = random_canon(make_spec(mode, layers, bi, input_size=inputs, hidden=hidden), seed=500 + layers)
    spec, L_D = canon.spec, canon.spec.num_pseudo_layers

    def run(params, x, lengths, h0, c0):  # batch-major: the states [B, L*D, H]
        y, h, c, _, _ = tf.raw_ops.CudnnRNNV3(
            input=x, input_h=tf.transpose(h0, [1, 0, 2]), input_c=tf.transpose(c0, [1, 0, 2]), params=params,
            sequence_lengths=lengths, rnn_mode=mode, is_training=False, time_major=False,
            direction="bidirectional" if bi else "unidirectional")
        h = tf.transpose(h, [1, 0, 2])
        return {"y": y, "h": h, "c": tf.transpose(c, [1, 0, 2])} if mode == "lstm" else {"y": y, "h": h}

    save_params_module(tmp_path / "src", pack(canon), [
        tf.TensorSpec([None, None, inputs], tf.float32, name="x"), tf.TensorSpec([None], tf.int32, name="lengths"),
        tf.TensorSpec([L_D, None, hidden], tf.float32, name="h0"),
        tf.TensorSpec([L_D, None, hidden], tf.float32, name="c0")], run, as_variable=False)
    convert(str(tmp_path / "src"), tmp_path / "out", formats=["onnx"])
    plain, states = ragged(spec)
    fed = {"x": plain["inputs"], "lengths": plain["sequence_lengths"], "h0": states["initial_h"],
           "c0": states.get("initial_c", np.zeros_like(states["initial_h"]))}
    steps = fed["x"].shape[1]
    cases = {"ragged": fed, "batch 0": {k: v[:, :0] if k in ("h0", "c0") else v[:0] for k, v in fed.items()},
             "0 steps": dict(fed, x=fed["x"][:, :0], lengths=np.zeros(4, np.int32)),
             "length past the steps": dict(fed, lengths=np.array([steps + 1, 2, 6, 1], np.int32))}
    import onnx

    wanted = {i.name for i in onnx.load(str(tmp_path / "out" / "model.onnx")).graph.input}
    paths = []
    for i, feeds in enumerate(cases.values()):
        np.savez(tmp_path / f"case{i}.npz", **{k: v for k, v in feeds.items() if k in wanted})
        paths.append(str(tmp_path / f"case{i}.npz"))
    proc = subprocess.run([sys.executable, "-c", ORT_PROBE, str(tmp_path / "out" / "model.onnx"), *paths],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    got = dict(zip(cases, json.loads(proc.stdout.strip().splitlines()[-1])))
    for name in ("batch 0", "0 steps", "length past the steps"):
        assert isinstance(got[name], str) and NODE_GUARD in got[name], (name, got[name])
    want = reference.forward(canon, plain["inputs"], plain["sequence_lengths"], states["initial_h"],
                             states.get("initial_c"))
    session_names = [o.name for o in ort.InferenceSession(str(tmp_path / "out" / "model.onnx"),
                                                          providers=["CPUExecutionProvider"]).get_outputs()]
    outputs = dict(zip(session_names, got["ragged"]))
    valid = np.arange(steps)[None, :] < plain["sequence_lengths"][:, None]
    np.testing.assert_allclose(np.asarray(outputs["y"])[valid], want[0][valid], atol=ATOL_FP32)
    np.testing.assert_allclose(outputs["h"], want[1], atol=ATOL_FP32)
    if mode == "lstm":
        np.testing.assert_allclose(outputs["c"], want[2], atol=ATOL_FP32)


ZERO_LENGTH = [("lstm", 2, True, 9, 4), ("gru", 2, True, 5, 3), ("rnn_relu", 2, True, 4, 6), ("lstm", 1, False, 3, 7)]


@pytest.mark.parametrize("runtime", ["onnxruntime", "openvino"])
@pytest.mark.parametrize("mode, layers, bi, inputs, hidden", ZERO_LENGTH,
                         ids=[f"{m}-L{n}-{'bi' if b else 'uni'}-I{i}-H{h}" for m, n, b, i, h in ZERO_LENGTH])
def test_the_portable_nodes_give_a_row_of_no_step_zeros_and_its_initial_states(tmp_path, runtime, mode, layers, bi,
                                                                                inputs, hidden):
    """A whole model's fused nodes (:func:`portable_stack_graph`, where a mask gives the lengths) take a length 0: a
    row a mask keeps no step of. Its outputs are zeros at every step and its final states its initial ones, as the
    reference computes (no step run), next to ragged rows; OpenVINO 2024.6 read memory before the outputs for it
    (a GatherElements index of -1: up to 2e34) and onnxruntime gave final h zeros, not h0."""
    from onnx import TensorProto, helper, numpy_helper

    from cudnn_port.exports.onnx import IR_VERSION, OPSET
    from cudnn_port.exports.onnx_portable import portable_stack_graph
    from cudnn_port.exports.onnx_scan import sequence_nodes_expanded

    if runtime == "openvino":
        pytest.importorskip("openvino", reason="OpenVINO is not installed (pip install 'cudnn-port[openvino]')")
    canon = random_canon(make_spec(mode, layers, bi, input_size=inputs, hidden=hidden), seed=200 + layers)
    spec, nodes, inits = canon.spec, [], []

    def node(op, ins, outs, **attrs):
        nodes.append(helper.make_node(op, ins, outs, **attrs))
        return outs[0]

    def const(name, value):
        inits.append(numpy_helper.from_array(value, name))
        return name

    is_lstm = mode == "lstm"
    x = node("Transpose", ["inputs"], ["x_0"], perm=[1, 0, 2])
    y, h_n, c_n = portable_stack_graph(canon, x, "sequence_lengths", "initial_h", "initial_c" if is_lstm else None,
                                       node, const)
    outs = [node("Transpose", [y], ["outputs"], perm=[1, 0, 2]), node("Identity", [h_n], ["final_h"])] + \
        ([node("Identity", [c_n], ["final_c"])] if is_lstm else [])
    state = [spec.num_pseudo_layers, "batch", hidden]
    value = helper.make_tensor_value_info
    graph = helper.make_graph(nodes, "zero_length", [
        value("inputs", TensorProto.FLOAT, ["batch", "time", inputs]),
        value("sequence_lengths", TensorProto.INT32, ["batch"])] + [
        value(n, TensorProto.FLOAT, state) for n in ["initial_h", "initial_c"][:1 + is_lstm]],
        [value(n, TensorProto.FLOAT, ["batch", "time", spec.num_dirs * hidden] if n == "outputs" else state)
         for n in outs], initializer=inits)
    sequence_nodes_expanded(graph)  # as every writer does: functions OpenVINO's sequence ops lack become loops
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    plain, states = ragged(spec, seed=13)
    plain["sequence_lengths"] = np.array([9, 0, 6, 1], np.int32)  # row 1: no step
    feeds = dict(plain, **states)
    want = reference.forward(canon, plain["inputs"], plain["sequence_lengths"], states["initial_h"],
                             states.get("initial_c"))
    assert not np.any(want[0][1]) and np.array_equal(want[1][:, 1], states["initial_h"][:, 1])  # the oracle's own
    if runtime == "openvino":
        from cudnn_port.exports.openvino import compile_onnx

        onnx.save(model, str(tmp_path / "zero_length.onnx"))
        compiled = compile_onnx(str(tmp_path / "zero_length.onnx"))
        result = compiled(feeds)
        got = [result[compiled.output(n)] for n in outs]
    else:
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        got = session.run(outs, feeds)
    assert_matches(got + [None] * (3 - len(got)), want, f"{runtime}, a row of length 0 among lengths 9, 6, 1:")
