"""TensorFlow.js: a stack's SavedModel as ``tensorflowjs_converter --input_format=tf_saved_model`` converts it, run
in Node by ``@tensorflow/tfjs``'s CPU backend (pure JavaScript, the kernels a browser's CPU backend runs), judged by
the NumPy reference (``reference.forward``, float64) on a ragged batch with non-zero initial states; and the graph
properties that conversion needs, checked everywhere (no ``SparseMatMul``, which TensorFlow.js does not run; no
control inputs, which TensorFlow.js reads as data inputs).

The conversion tests skip, saying why, unless the converter and Node with @tensorflow/tfjs are installed (CI has
neither): ``TFJS_CONVERTER`` names ``tensorflowjs_converter`` (default: the one on PATH; ``pip install
tensorflowjs==4.22.0`` in an environment of its own, see docs/runtimes.md, "JavaScript"), ``NODE_PATH`` a
``node_modules`` folder holding ``@tensorflow/tfjs`` (``npm install @tensorflow/tfjs@4.22.0``).
"""
import json
import os
import shutil
import subprocess

import numpy as np
import pytest

from helpers import assert_close, make_spec, ragged_batch, random_canon
from cudnn_port import reference

tf = pytest.importorskip("tensorflow")

from cudnn_port.exports.tensorflow import build_module, write_frozen_graph, write_saved_model  # noqa: E402

RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tfjs_run.js")
# TensorFlow.js' CPU kernels in float32 against the float64 reference: the fp32 tolerance of the other exports
ATOL, RTOL = 1e-5, 1e-5
CASES = [("lstm", 2, True, 3, 5), ("gru", 2, True, 4, 3)]  # mode, layers, both directions, input != hidden


def tfjs_tools():
    """(converter, node, NODE_PATH), or a pytest skip naming what is missing."""
    converter = os.environ.get("TFJS_CONVERTER") or shutil.which("tensorflowjs_converter")
    node = shutil.which("node")
    node_path = os.environ.get("NODE_PATH", "")
    if not converter or not os.path.exists(converter):
        pytest.skip("tensorflowjs_converter is not installed (pip install tensorflowjs==4.22.0 in its own "
                    "environment; TFJS_CONVERTER names it)")
    if not node:
        pytest.skip("node is not installed")
    found = any(os.path.isdir(os.path.join(p, "@tensorflow", "tfjs")) for p in node_path.split(os.pathsep) if p)
    if not found:
        pytest.skip("@tensorflow/tfjs is not installed (npm install @tensorflow/tfjs@4.22.0; NODE_PATH names its "
                    "node_modules)")
    return converter, node, node_path


def convert_saved_model(converter, saved_model, out):
    """``tensorflowjs_converter`` on the with_initial_state signature, as docs/runtimes.md says; asserts it took it."""
    done = subprocess.run([converter, "--input_format=tf_saved_model", "--signature_name=with_initial_state",
                           "--use_structured_outputs_names=true", str(saved_model), str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads((out / "model.json").read_text())


def run_tfjs(node, node_path, model_dir, feeds, tmp_path):
    """The converted model's outputs in TensorFlow.js ({name: array}), or the CompletedProcess where it failed."""
    feeds_path, out_path = tmp_path / "feeds.json", tmp_path / "out.json"
    feeds_path.write_text(json.dumps({k: {"dtype": "int32" if v.dtype == np.int32 else "float32",
                                          "shape": list(v.shape), "data": v.ravel().tolist()}
                                      for k, v in feeds.items()}))
    done = subprocess.run([node, RUNNER, str(model_dir), str(feeds_path), str(out_path)], capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, NODE_PATH=node_path))
    if done.returncode:
        return done
    return {k: np.array(v["data"], np.float64).reshape(v["shape"]) for k, v in json.loads(out_path.read_text()).items()}


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_tensorflow_js_runs_the_converted_saved_model_to_the_reference_and_refuses_bad_lengths(tmp_path, case):
    converter, node, node_path = tfjs_tools()
    mode, layers, bi, inputs, hidden = case
    spec = make_spec(mode, layers, bi, input_size=inputs, hidden=hidden)
    canon = random_canon(spec, seed=63)
    write_saved_model(canon, str(tmp_path / "saved_model"))
    model = convert_saved_model(converter, tmp_path / "saved_model", tmp_path / "web_model")
    ops = {n["op"] for n in model["modelTopology"]["node"]}
    assert "SparseMatMul" not in ops, sorted(ops)
    x, lengths, h_0, c_0 = ragged_batch(spec, batch=4, steps=7, seed=64)
    feeds = {"inputs": x, "sequence_lengths": lengths, "initial_h": h_0}
    if mode == "lstm":
        feeds["initial_c"] = c_0
    got = run_tfjs(node, node_path, tmp_path / "web_model", feeds, tmp_path)
    assert isinstance(got, dict), got.stderr[-2000:]
    want = reference.forward(canon, x, lengths, h_0, c_0 if mode == "lstm" else None)
    names = ("outputs", "final_h", "final_c")[:3 if mode == "lstm" else 2]
    assert sorted(got) == sorted(names), sorted(got)
    for name, value in zip(names, want):
        assert_close(got[name], value, f"TensorFlow.js {mode} {name}", ATOL, RTOL, same_shape=True)
    for bad in (0, x.shape[1] + 1):  # the length guard holds in TensorFlow.js too: its gather refuses the index
        done = run_tfjs(node, node_path, tmp_path / "web_model", dict(feeds, sequence_lengths=np.array(
            [7, bad, 2, 1], np.int32)), tmp_path)
        assert not isinstance(done, dict), f"length {bad} was not refused"
        assert "GatherV2" in done.stderr, done.stderr[-500:]


@pytest.mark.slow
def test_tensorflow_js_runs_the_rewritten_graph_of_a_tf1_era_saved_model(tmp_path):
    """A SavedModel calling ``CudnnRNN`` itself (what TF1-era graphs hold), converted (the graph road), then through
    tensorflowjs_converter: TensorFlow.js runs it to the reference (the original needs a GPU)."""
    converter, node, node_path = tfjs_tools()
    from helpers import random_blob, save_raw_op_model
    from cudnn_port import convert
    from cudnn_port.layout import unpack

    spec = make_spec("lstm", 2, True, input_size=3, hidden=5)
    blob = random_blob(spec, seed=68)
    convert(save_raw_op_model(str(tmp_path / "source"), spec, blob), str(tmp_path / "out"))
    done = subprocess.run([converter, "--input_format=tf_saved_model", str(tmp_path / "out" / "saved_model"),
                           str(tmp_path / "web_model")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    x = np.random.default_rng(69).normal(size=(3, 6, 3)).astype(np.float32)
    got = run_tfjs(node, node_path, tmp_path / "web_model", {"inputs": x}, tmp_path)
    assert isinstance(got, dict), got.stderr[-2000:]
    want = reference.forward(unpack(spec, blob), x)
    assert sorted(got) == ["final_h", "outputs"], sorted(got)
    assert_close(got["outputs"], want[0], "TensorFlow.js outputs", ATOL, RTOL, same_shape=True)
    assert_close(got["final_h"], want[1], "TensorFlow.js final_h", ATOL, RTOL, same_shape=True)


def serving_nodes(module):
    """Every node of both serving signatures' graphs, their functions included."""
    nodes = []
    for fn in (module.serve, module.serve_state):
        graph_def = fn.graph.as_graph_def()
        nodes += list(graph_def.node) + [n for f in graph_def.library.function for n in f.node_def]
    return nodes


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_stack_graphs_hold_no_sparse_matmul_and_no_control_inputs(tmp_path, mode):
    """TensorFlow.js refuses ``SparseMatMul`` ("Unsupported Ops"), and reads a control input as a data input:
    once the converter's optimizer moved the control inputs that made both directions wait for each other onto a
    ``ConcatV2``, TensorFlow.js took one for the axis. So the stack's SavedModel and frozen GraphDef hold neither
    (the wait is an ``IdentityN``, a data dependency)."""
    spec = make_spec(mode, 2, True, input_size=3, hidden=5)
    canon = random_canon(spec, seed=65)
    nodes = serving_nodes(build_module(canon))
    write_frozen_graph(canon, str(tmp_path / "frozen_graph.pb"))
    graph_def = tf.compat.v1.GraphDef()
    graph_def.ParseFromString((tmp_path / "frozen_graph.pb").read_bytes())
    nodes += list(graph_def.node) + [n for f in graph_def.library.function for n in f.node_def]
    assert not [n.name for n in nodes if n.op == "SparseMatMul"]
    controlled = [(n.op, n.name) for n in nodes if any(i.startswith("^") for i in n.input)]
    assert not controlled, controlled[:5]
    assert any(n.op == "IdentityN" for n in nodes)  # the directions still wait for each other
