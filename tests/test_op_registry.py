"""The allow-list against TensorFlow's own op registry: every op the installed TensorFlow registers is either run or
refused with a named reason, and no op TensorFlow registers as stateless is refused by omission (a hand-typed list
kept missing pure ops: an OCR model's ``Roll`` was refused). A graph of ``tf.roll`` around a cuDNN node converts."""
import numpy as np
import pytest

from helpers import make_spec, random_blob

tf = pytest.importorskip("tensorflow")


def _registry():
    from tensorflow.python.framework import op_def_registry  # the registry itself: the judge of what is stateless

    ops = {}
    for name in dir(tf.raw_ops):
        op_def = None if name.startswith("_") else op_def_registry.get(name)
        if op_def is not None:
            ops[name] = op_def.is_stateful
    return ops


def test_every_registered_op_is_run_or_refused_with_its_reason():
    from cudnn_port.graphs import allowed_ops

    registry = _registry()
    assert len(registry) > 1000, len(registry)
    pure = allowed_ops.pure_ops()
    refused = {op: allowed_ops.why_refused(op) for op in sorted(registry) if op not in pure}
    by_omission = [op for op, why in refused.items() if not registry[op] and why == allowed_ops.OTHER_REASON]
    assert not by_omission, f"stateless ops refused by omission: {by_omission}"
    assert all(why for why in refused.values())
    listing = "\n".join(f"{op}: {why}" for op, why in refused.items())  # shown when an assertion below fails
    for op in ("ReadFile", "WriteFile", "MatchingFiles", "ImmutableConst", "PyFunc", "EagerPyFunc", "PyFuncStateless",
               "Abort", "DecodeProtoV2", "TFRecordDataset", "QueueDequeueV2", "DebugIdentityV2", "BatchFunction",
               "MaxPoolGradWithArgmax", "DecodePng", "DecodeCompressed", "QuantizedConv2D", "SparseMatrixAdd"):
        assert op not in pure and op in refused, (op, listing)
    for op in ("Roll", "MatMul", "CudnnRNNV3", "FFT", "MatrixInverse", "StatelessRandomUniformV2", "VarHandleOp",
               "LookupTableFindV2", "TanhGrad", "NthElement", "Einsum"):
        assert op in pure, op


@pytest.mark.slow
def test_a_graph_with_roll_around_a_cudnn_node_converts(tmp_path):
    """The OCR-style graph: tf.roll on the features before a CudnnRNNV3 node, judged by the original on CPU."""
    from cudnn_port import convert, verify

    spec = make_spec("lstm", 1, True)
    blob = random_blob(spec, seed=8)

    class Reader(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, None, spec.input_size], tf.float32)])
        def run(self, x):
            shifted = tf.roll(x, shift=1, axis=2)
            state = tf.zeros([tf.shape(x)[0], spec.num_dirs, spec.num_units])
            lengths = tf.fill([tf.shape(x)[0]], tf.shape(x)[1])
            y = tf.raw_ops.CudnnRNNV3(input=shifted, input_h=state, input_c=state, params=tf.constant(blob),
                                      sequence_lengths=lengths, rnn_mode="lstm", direction="bidirectional",
                                      is_training=False, time_major=False)[0]
            return {"outputs": y}

    module = Reader()
    tf.saved_model.save(module, str(tmp_path / "src"), signatures=module.run.get_concrete_function())
    manifest = convert(tmp_path / "src", tmp_path / "out")
    assert "onnx" in manifest["model_artifacts"], manifest["warnings"]
    report = verify(tmp_path / "out")
    assert report["passed"], [r for r in report["rows"] if r["passed"] is False]
    from cudnn_port import reference
    from cudnn_port.layout import unpack

    x = np.random.default_rng(3).normal(size=(2, 5, spec.input_size)).astype("float32")
    want = reference.forward(unpack(spec, blob), np.roll(x, 1, axis=2), [5, 5])[0]
    import onnxruntime as ort

    got = ort.InferenceSession(str(tmp_path / "out" / "model.onnx"),
                               providers=["CPUExecutionProvider"]).run(["outputs"], {"x": x})[0]
    assert np.allclose(got, want, atol=1e-5), np.abs(got - want).max()
