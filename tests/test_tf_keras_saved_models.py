"""The most common GPU-trained TF2 artifact: a tf_keras (Keras 2) ``model.save()`` SavedModel of a model that was
compiled and trained. Its function library holds tf_keras's ``gpu_lstm_with_fallback`` / ``gpu_gru_with_fallback``
(CudnnRNNV3) and their gradient functions (CudnnRNNBackpropV3) beside the standard implementation the graph calls.

The models are made by tests/fixtures/make_tf_keras_saved_models.py with tf_keras 2.21 (not needed here) and
committed as one archive; tf_keras's own CPU outputs are the judge (``expected.npz``). A graph whose signature
computes gradients through raw cuDNN ops is judged against PyTorch's autograd.
"""
import os

import numpy as np
import pytest

from helpers import (ROOT, assert_clean_error, make_spec, random_blob, run_cli, save_params_module, torch_grads,
                     unpack_fixture)
from cudnn_port import convert
from cudnn_port.verify import verify

tf = pytest.importorskip("tensorflow")
pytestmark = pytest.mark.slow  # SavedModels converted to every artifact
ARCHIVE = os.path.join(ROOT, "tests", "fixtures", "tf_keras_saved_models.tar.xz")
MODELS = ["lstm", "gru", "bilstm", "stacked", "masked", "tagger", "ocr", "module"]
MASKED = {"masked": "features", "tagger": "tokens"}  # right-padded inputs: compare valid steps in ONNX
ATOL = 1e-5  # fp32, tiny models: measured max 2.4e-7 (ONNX) and 0.0 (SavedModel: the same standard functions)


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory):
    return unpack_fixture(tmp_path_factory, ARCHIVE, "tf_keras_saved_models")


def all_ops(path):
    from cudnn_port.graphs import load_proto

    proto = load_proto(str(path))
    return {n.op for m in proto.meta_graphs for n in m.graph_def.node} | \
        {n.op for m in proto.meta_graphs for f in m.graph_def.library.function for n in f.node_def}


def onnx_ops(graph):
    """Every op type of an ONNX graph, subgraphs (If branches, Loop bodies) included."""
    found = set()
    for node in graph.node:
        found.add(node.op_type)
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                found |= onnx_ops(sub)
    return found


def valid_steps(name, x):
    """[B, T] bool: the steps before each row's right padding (all True for unmasked models)."""
    if name not in MASKED:
        return None
    return (np.abs(x).sum(-1) if x.ndim == 3 else x) != 0


@pytest.mark.parametrize("name", MODELS)
def test_trained_tf_keras_saved_model_converts(tmp_path, saved_models, name):
    import onnx

    from cudnn_port.exports.runners import onnx_session

    folder, expected = saved_models
    source = folder / name
    assert any(op.startswith("CudnnRNNBackprop") for op in all_ops(source))  # training functions are there
    manifest = convert(str(source), tmp_path / "out")
    assert manifest["uncalled_functions_dropped"]["with_cudnn_ops"]
    out = tmp_path / "out"
    assert not [op for op in all_ops(out / "saved_model") if op.startswith("Cudnn")]
    loaded = tf.saved_model.load(str(out / "saved_model"))
    x = expected[f"{name}/x"]
    signature = loaded.signatures["serving_default"]
    feed = list(signature.structured_input_signature[1])[0]
    got = {k: v.numpy() for k, v in signature(**{feed: tf.constant(x)}).items()}
    want = {k[len(name) + 1:]: v for k, v in expected.items() if k.startswith(f"{name}/") and k != f"{name}/x"}
    if name != "module":
        want = {list(got)[0]: want["y"]}
    for key, value in want.items():
        np.testing.assert_allclose(got[key], value, atol=ATOL, rtol=0, err_msg=f"{name} SavedModel {key}")
    kinds = onnx_ops(onnx.load(str(out / "model.onnx")).graph)  # masked: fused nodes in the right-padded branch
    assert {"LSTM", "GRU"} & kinds, kinds
    session = onnx_session(out / "model.onnx")
    onnx_out = dict(zip([o.name for o in session.get_outputs()], session.run(None, {feed: x})))
    valid = valid_steps(name, x)
    for key, value in want.items():
        result = onnx_out[key]
        if valid is not None and value.ndim == 3:  # padding: cuDNN (and ONNX) emit zeros, tf_keras on CPU repeats
            result, value = result[valid], value[valid]
        np.testing.assert_allclose(result, value, atol=ATOL, rtol=0, err_msg=f"{name} ONNX {key}")
    assert verify(out)["passed"]


def save_gradient_graph(path, spec, blob):
    """A SavedModel whose signature computes gradients through raw cuDNN ops (CudnnRNNV3, batch-major, ragged):
    its CudnnRNNBackpropV3 node is called, so it is replaced rather than pruned."""
    L_D, H = spec.num_pseudo_layers, spec.num_units

    def grads(params, x, lengths, h0, c0, gy, ghn, gcn):
        with tf.GradientTape() as tape:
            tape.watch([x, h0, c0])
            y, hn, cn, _, _ = tf.raw_ops.CudnnRNNV3(
                input=x, input_h=tf.transpose(h0, [1, 0, 2]), input_c=tf.transpose(c0, [1, 0, 2]),
                params=params, sequence_lengths=lengths, rnn_mode=spec.mode, is_training=True,
                direction="bidirectional" if spec.bidirectional else "unidirectional", time_major=False)
            loss = tf.reduce_sum(y * gy) + tf.reduce_sum(tf.transpose(hn, [1, 0, 2]) * ghn) + \
                tf.reduce_sum(tf.transpose(cn, [1, 0, 2]) * gcn)
        dx, dparams, dh0, dc0 = tape.gradient(loss, [x, params, h0, c0])
        return {"y": y, "dx": dx, "dparams": tf.convert_to_tensor(dparams), "dh0": dh0, "dc0": dc0}

    save_params_module(path, blob, [tf.TensorSpec([None, None, spec.input_size], tf.float32, name="x"),
                                    tf.TensorSpec([None], tf.int32, name="lengths"),
                                    tf.TensorSpec([L_D, None, H], tf.float32, name="h0"),
                                    tf.TensorSpec([L_D, None, H], tf.float32, name="c0"),
                                    tf.TensorSpec([None, None, spec.output_size], tf.float32, name="gy"),
                                    tf.TensorSpec([L_D, None, H], tf.float32, name="ghn"),
                                    tf.TensorSpec([L_D, None, H], tf.float32, name="gcn")], grads)


def test_reachable_backward_nodes_become_cpu_gradients(tmp_path, capsys):
    """The gradient of the replaced backward node equals PyTorch's autograd on the same ragged batch."""
    pytest.importorskip("torch")

    spec = make_spec("lstm", 2, True)
    blob = random_blob(spec, seed=21)
    save_gradient_graph(tmp_path / "src", spec, blob)
    assert "CudnnRNNBackpropV3" in all_ops(tmp_path / "src")
    code, _, err = run_cli(capsys, "convert", tmp_path / "src", tmp_path / "refused")  # ONNX has no backward op
    assert_clean_error(code, err, "backward op", "--formats saved_model")
    manifest = convert(str(tmp_path / "src"), tmp_path / "out", formats=["saved_model"])
    assert {n["op"] for n in manifest["nodes"]} == {"CudnnRNNV3", "CudnnRNNBackpropV3"}
    assert not [op for op in all_ops(tmp_path / "out" / "saved_model") if op.startswith("Cudnn")]
    rng = np.random.default_rng(22)
    x = rng.normal(size=(3, 6, spec.input_size)).astype(np.float32)
    lengths = np.array([6, 1, 4], np.int32)
    x[np.arange(6)[None, :] >= lengths[:, None]] = 0
    h0, c0, ghn, gcn = (rng.normal(size=(spec.num_pseudo_layers, 3, spec.num_units)).astype(np.float32)
                        for _ in range(4))
    gy = rng.normal(size=(3, 6, spec.output_size)).astype(np.float32)
    signature = tf.saved_model.load(str(tmp_path / "out" / "saved_model")).signatures["serving_default"]
    got = signature(x=x, lengths=lengths, h0=h0, c0=c0, gy=gy, ghn=ghn, gcn=gcn)
    forward, grads = torch_grads(spec, blob, x, lengths, h0, c0, gy, ghn, gcn)
    for key, want in (("y", forward[0]), ("dparams", grads[0]), ("dx", grads[1]), ("dh0", grads[2]),
                      ("dc0", grads[3])):
        np.testing.assert_allclose(got[key].numpy(), want, atol=1e-5, rtol=1e-4, err_msg=key)
