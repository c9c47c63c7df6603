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
