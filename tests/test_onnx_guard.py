"""The empty-batch guard of every whole-model ONNX (:func:`cudnn_port.exports.onnx_guard.guard_empty`) on hand-built
graphs, run in onnxruntime against NumPy: where an output's rows are sliced back (in front of a head that widens
them, at the output otherwise), that a batch is exact, an empty batch gives empty outputs, zero steps a catchable
error naming the guard, and how many nodes the guard adds. No recurrent node here, so nothing can end the process;
tests/test_onnx_runtimes.py runs the guard around LSTM and GRU nodes in a child process."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from cudnn_port.exports.onnx import IR_VERSION, OPSET  # noqa: E402
from cudnn_port.exports.onnx_guard import PREFIX, TIME_GUARD, guard_empty  # noqa: E402

FEATURES, UNITS = 3, 4
ATOL, RTOL = 1e-6, 1e-5  # float32 sums of a few products, the same order in NumPy and onnxruntime


def _graph(width, extra_reader=False, seed=0):
    """x [batch, time, 3] -> MatMul W1 [3, 4] -> Tanh -> MatMul W2 [4, width] -> Add b [width] -> Mul s (scalar):
    ``out``; with ``extra_reader``, ``out`` is also read by a Relu (a second output). Returns (model, weights)."""
    rng = np.random.default_rng(seed)
    w = {"W1": rng.normal(size=(FEATURES, UNITS)), "W2": rng.normal(size=(UNITS, width)), "b": rng.normal(size=width),
         "s": np.array(rng.normal())}
    w = {k: v.astype(np.float32) for k, v in w.items()}
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h1"], name="first"),
             helper.make_node("Tanh", ["h1"], ["h2"], name="tanh"),
             helper.make_node("MatMul", ["h2", "W2"], ["h3"], name="head"),
             helper.make_node("Add", ["h3", "b"], ["h4"], name="bias"),
             helper.make_node("Mul", ["h4", "s"], ["out"], name="scale")]
    outputs = [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", "time", width])]
    if extra_reader:
        nodes.append(helper.make_node("Relu", ["out"], ["relu"], name="relu"))
        outputs.append(helper.make_tensor_value_info("relu", TensorProto.FLOAT, ["batch", "time", width]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                          ["batch", "time", FEATURES])],
                              outputs, [numpy_helper.from_array(v, k) for k, v in w.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return model, w


def _want(w, x):
    out = (np.tanh(x.astype(np.float64) @ w["W1"]) @ w["W2"] + w["b"]) * w["s"]
    return out, np.maximum(out, 0)


def _guarded(width, extra_reader=False):
    model, w = _graph(width, extra_reader)
    guard_empty(model)
    onnx.checker.check_model(model)
    return model, w, ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _row_slice(model, output="out"):
    return next(n for n in model.graph.node if n.name == f"{PREFIX}{output}/rows")


@pytest.mark.parametrize("width, where", [(30, "head"), (2, "output")])
def test_rows_are_sliced_where_fewest_values_are_copied(width, where):
    """A head that widens the rows (4 -> 30): sliced in front of it, its MatMul reading the slice; one that narrows
    them (4 -> 2): sliced at the output, the last node."""
    model, _, _ = _guarded(width)
    rows = _row_slice(model)
    readers = [n.name for n in model.graph.node if rows.output[0] in n.input]
    if where == "head":
        assert rows.input[0] == "h2" and readers == ["head"], (rows, readers)
    else:
        assert rows.output[0] == "out" and model.graph.node[-1] == rows, rows


@pytest.mark.parametrize("width", [30, 2])
@pytest.mark.parametrize("batch, steps", [(5, 7), (1, 1), (0, 4)])
def test_guarded_graph_is_exact_and_an_empty_batch_empty(width, batch, steps):
    model, w, session = _guarded(width)
    x = np.random.default_rng(batch + steps).normal(size=(batch, steps, FEATURES)).astype(np.float32)
    got = session.run(["out"], {"x": x})[0]
    want = _want(w, x)[0]
    assert got.shape == (batch, steps, width)
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=RTOL)


def test_an_output_read_again_keeps_its_slice_at_the_output():
    """``out`` also feeds a Relu (a second output): its rows cannot be cut before the head, or the Relu would read
    the sliced rows; both outputs are exact, and empty for an empty batch."""
    model, w, session = _guarded(30, extra_reader=True)
    assert _row_slice(model).output[0] == "out" and _row_slice(model, "relu").output[0] == "relu"
    for batch in (3, 0):
        x = np.random.default_rng(batch).normal(size=(batch, 6, FEATURES)).astype(np.float32)
        for got, want in zip(session.run(["out", "relu"], {"x": x}), _want(w, x)):
            assert got.shape == (batch, 6, 30)
            np.testing.assert_allclose(got, want, atol=ATOL, rtol=RTOL)


def test_zero_steps_fail_in_the_node_named_for_it():
    _, _, session = _guarded(30)
    with pytest.raises(Exception, match=TIME_GUARD.split(":")[0]):
        session.run(["out"], {"x": np.zeros((3, 0, FEATURES), np.float32)})


def test_the_guard_of_one_input_and_one_output_is_nine_nodes():
    """Two one-node Shapes (batch, time), two Equals, the time probe (Where, ConstantOfShape), the pads (Where), the
    Pad and the Slice: what onnxruntime runs at every call on top of the model, none of it foldable."""
    model, _, _ = _guarded(30)
    guard = [n.op_type for n in model.graph.node if n.name.startswith(PREFIX)]
    assert sorted(guard) == sorted(["Shape", "Shape", "Equal", "Equal", "Where", "ConstantOfShape", "Where", "Pad",
                                    "Slice"]), guard
