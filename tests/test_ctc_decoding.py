"""OCR models whose serving signature decodes greedy CTC: the ONNX decodes what the original decodes, blank images
(no label in any row) and TensorFlow's ``blank_index`` included.

tf2onnx's own CTCGreedyDecoder conversion fails in onnxruntime when no row decodes a label (a negative shape in an
``Expand``) and takes the last class as blank whatever ``blank_index`` says; cudnn-port converts the op itself
(:mod:`cudnn_port.exports.onnx_ctc`, docs/conventions.md section 7.1). The judges are stock TensorFlow on CPU: the
outputs of the original tf_keras model recorded by tests/fixtures/make_tf_keras_ctc_ocr.py, and the decoding
functions below run eagerly.
"""
import os

import numpy as np
import pytest

from helpers import ROOT, run_cli, unpack_fixture

tf = pytest.importorskip("tensorflow")
pytest.importorskip("tf2onnx")
ARCHIVE = os.path.join(ROOT, "tests", "fixtures", "tf_keras_ctc_ocr.tar.xz")
CASES = ["blank_1", "text_1", "blank_3", "mixed_3"]  # batch 1 and ragged batch 3 (widths 12, 1, 7)
ATOL = 1e-5  # fp32 probabilities and log probabilities: measured <= 1e-6; decoded ids are compared exactly


def split(expected, case):
    """(inputs, outputs) of ``case``: {key: array} each."""
    pick = lambda kind: {k.split("/", 2)[2]: v for k, v in expected.items()
                         if k.startswith(f"{case}/{kind}/")}
    return pick("in"), pick("out")


@pytest.mark.slow
def test_ocr_model_with_ctc_decoding_converts_verifies_and_decodes_blank_images(tmp_path, tmp_path_factory, capsys):
    """``convert`` then ``verify`` exit 0 on a tf_keras OCR model that decodes in its signature, and its ONNX gives
    the original's decoded ids exactly on blank and text images, batch 1 and ragged batch 3."""
    from cudnn_port.exports.runners import onnx_session

    folder, expected = unpack_fixture(tmp_path_factory, ARCHIVE, "tf_keras_ctc_ocr")
    out = tmp_path / "out"
    code, _, err = run_cli(capsys, "convert", folder / "ocr", out)
    assert code == 0, err
    code, report, err = run_cli(capsys, "verify", out)
    assert code == 0, report + err
    session = onnx_session(out / "model.onnx")
    names = [o.name for o in session.get_outputs()]
    for case in CASES:
        feeds, want = split(expected, case)
        rows_with_text = (feeds["image"] != 0).any((1, 2, 3))
        assert ((want["labels_padded"] >= 0).any(-1) == rows_with_text).all(), case  # the judge: blank rows empty
        if not rows_with_text.any():
            assert want["labels"].shape == (len(rows_with_text), 0), case
        got = dict(zip(names, session.run(None, feeds)))
        assert set(got) == set(want)
        for key in ("labels", "labels_padded"):
            assert got[key].shape == want[key].shape and (got[key] == want[key]).all(), \
                f"{case} {key}: ONNX {got[key].tolist()}, TensorFlow {want[key].tolist()}"
        for key in ("probs", "log_prob"):
            np.testing.assert_allclose(got[key], want[key], atol=ATOL, rtol=0, err_msg=f"{case} {key}")


def decoders():
    """{name: tf.function(log_probs [B, T, C], lengths [B] int32) -> decoded ids}: Keras 3's ``ops.ctc_decode``
    (the blank is class 0: ``blank_index=0``), and ``tf.nn.ctc_greedy_decoder`` with ``blank_index=2`` and no
    merging, densified with the decoder's own shape (``[B, 0]`` when nothing decodes), with its indices, shape and
    log probability."""
    spec = [tf.TensorSpec([None, None, 5], tf.float32, name="log_probs"),
            tf.TensorSpec([None], tf.int32, name="lengths")]

    def keras3(log_probs, lengths):
        import keras

        return {"ids": keras.ops.ctc_decode(log_probs, lengths, strategy="greedy")[0][0]}

    def middle_blank(log_probs, lengths):
        (decoded,), log_prob = tf.nn.ctc_greedy_decoder(tf.transpose(log_probs, [1, 0, 2]), lengths,
                                                        merge_repeated=False, blank_index=2)
        return {"ids": tf.sparse.to_dense(decoded, default_value=-1), "indices": decoded.indices,
                "shape": decoded.dense_shape, "log_prob": log_prob}

    return {"keras3": (tf.function(keras3, input_signature=spec), 0),
            "middle_blank": (tf.function(middle_blank, input_signature=spec), 2)}


@pytest.mark.parametrize("name", ["keras3", "middle_blank"])
def test_ctc_decoder_honours_blank_index_and_empty_decodes(name):
    """The ONNX of a decoding graph equals TensorFlow on random log probabilities (repeats included) and on
    blank-only ones, batch 1 and ragged batch 3 (lengths 7, 1, 4, and 0, 2, 0)."""
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    from cudnn_port.exports.onnx_tf import write_graph_onnx
    from cudnn_port.exports.runners import onnx_session

    function, blank = decoders()[name]
    concrete = function.get_concrete_function()
    frozen = convert_variables_to_constants_v2(concrete).graph.as_graph_def()
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"ctc_{name}_{os.getpid()}.onnx")
    outputs = tf.nest.flatten(concrete.structured_outputs, expand_composites=True)
    keys = sorted(concrete.structured_outputs)  # flatten orders a dict's values by sorted key
    try:
        renames = dict({t.name: t.name.split(":")[0] for t in concrete.inputs},
                       **{t.name: k for t, k in zip(outputs, keys)})
        write_graph_onnx(frozen, [t.name for t in concrete.inputs], [t.name for t in outputs], path, renames)
        session = onnx_session(path)
    finally:
        if os.path.exists(path):
            os.remove(path)
    rng = np.random.default_rng(40)
    for batch, lengths in ((1, [7]), (3, [7, 1, 4]), (3, [0, 2, 0])):
        random = np.log(rng.dirichlet(np.full(5, 0.3), size=(batch, 7))).astype(np.float32)
        blank_only = np.log(np.full((batch, 7, 5), 0.1, np.float32))
        blank_only[..., blank] = np.log(0.6)
        for label, log_probs in (("random", random), ("blank", blank_only)):
            feeds = {"log_probs": log_probs, "lengths": np.array(lengths, np.int32)}
            want = {k: v.numpy() for k, v in function(**feeds).items()}
            got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
            assert label == "random" or (want["ids"] == -1).all()
            for key, value in want.items():
                tolerance = ATOL if key == "log_prob" else 0  # ids, indices and shapes exactly
                assert got[key].shape == value.shape, f"{name} {label} {lengths} {key}: {got[key].shape}"
                np.testing.assert_allclose(got[key], value, atol=tolerance, rtol=0,
                                           err_msg=f"{name} {label} {lengths} {key}")
