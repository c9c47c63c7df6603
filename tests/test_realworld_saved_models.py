"""Published tf.keras SavedModels that other people trained on GPUs (tests/fixtures/realworld/, each folder with its
LICENSE): ``convert`` then ``verify`` exit 0, and OUT/saved_model and OUT/model.onnx compute what the ORIGINAL
model's ``serving_default`` computes when stock TensorFlow runs it on CPU (Grappler runs each layer's
``standard_lstm`` / ``standard_gru`` twin there). The original's optimizer slots stop ``tf.saved_model.load``
without tf_keras, so the judge loads it the TF1 way, ``tf.compat.v1.saved_model.loader.load`` in a session, which
restores variables by name and shares no code with cudnn-port.
"""
import os

import numpy as np
import pytest

from helpers import ROOT, run_cli

tf = pytest.importorskip("tensorflow")
pytestmark = pytest.mark.slow  # published SavedModels converted and verified
REALWORLD = os.path.join(ROOT, "tests", "fixtures", "realworld")
MODELS = ["iteam1_rnn/lstm_model", "iteam1_rnn/gru_model"]
ATOL = 1e-5  # fp32 graphs of 64 units over 5 steps; measured <= 4.8e-7 (ONNX) and 0 (SavedModel)


def converted_and_verified(capsys, source, out):
    """``cudnn-port convert SOURCE OUT`` and ``verify OUT``, both exiting 0; returns OUT."""
    code, _, err = run_cli(capsys, "convert", source, out)
    assert code == 0, err
    code, report, err = run_cli(capsys, "verify", out)
    assert code == 0, report + err
    return out


def original_serving(path, feeds, signature="serving_default"):
    """{output key: array} of the original SavedModel's signature, run by stock TensorFlow in a TF1 session."""
    with tf.Graph().as_default() as graph, tf.compat.v1.Session(graph=graph) as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
        sig = meta.signature_def[signature]
        fetches = {k: v.name for k, v in sig.outputs.items()}
        return session.run(fetches, {sig.inputs[k].name: v for k, v in feeds.items()})


def random_feeds(path, seed, batch=3, signature="serving_default"):
    """N(0, 1) inputs for every input of the signature, its fixed dimensions kept (unknown ones: batch, then 6)."""
    from cudnn_port.graphs import load_proto

    rng = np.random.default_rng(seed)
    sig = load_proto(path).meta_graphs[0].signature_def[signature]
    feeds = {}
    for key, value in sig.inputs.items():
        dims = [d.size for d in value.tensor_shape.dim]
        shape = [d if d > 0 else (batch if i == 0 else 6) for i, d in enumerate(dims)]
        feeds[key] = rng.normal(size=shape).astype(tf.as_dtype(value.dtype).as_numpy_dtype)
    return feeds


@pytest.mark.parametrize("name", MODELS)
def test_published_saved_model_converts_and_matches_the_original(tmp_path, capsys, name):
    from cudnn_port.exports.runners import onnx_session

    source = os.path.join(REALWORLD, name)
    assert os.path.isfile(os.path.join(REALWORLD, name.split("/")[0], "LICENSE"))
    out = converted_and_verified(capsys, source, tmp_path / "out")
    feeds = random_feeds(source, seed=31)
    want = original_serving(source, feeds)
    signature = tf.saved_model.load(str(out / "saved_model")).signatures["serving_default"]
    got = {k: v.numpy() for k, v in signature(**feeds).items()}
    assert set(got) == set(want)
    session = onnx_session(out / "model.onnx")
    onnx_got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    for key, value in want.items():
        assert np.abs(value).max() > 1e-3  # a live output, not a constant zero
        np.testing.assert_allclose(got[key], value, atol=ATOL, rtol=0, err_msg=f"{name} SavedModel {key}")
        np.testing.assert_allclose(onnx_got[key], value, atol=ATOL, rtol=0, err_msg=f"{name} ONNX {key}")


def reshard(source, dest):
    """Copy SavedModel ``source`` to ``dest`` with its variables split into two shards
    (``variables.data-00000-of-00002``, ``-00001-of-00002``), as TF 2.0-era multi-device saves wrote them: stock
    ``SaveV2`` per shard, then ``MergeV2Checkpoints``."""
    import shutil

    shutil.copytree(source, dest)
    folder = os.path.join(dest, "variables")
    reader = tf.train.load_checkpoint(os.path.join(folder, "variables"))
    names = sorted(reader.get_variable_to_dtype_map())
    values = {n: reader.get_tensor(n) for n in names}
    for name in os.listdir(folder):
        os.remove(os.path.join(folder, name))
    parts = [os.path.join(folder, "tmp", f"part-{i:05d}-of-00002") for i in range(2)]
    for part, chosen in zip(parts, (names[0::2], names[1::2])):
        tf.raw_ops.SaveV2(prefix=part, tensor_names=chosen, shape_and_slices=[""] * len(chosen),
                          tensors=[tf.constant(values[n]) for n in chosen])
    tf.raw_ops.MergeV2Checkpoints(checkpoint_prefixes=parts, destination_prefix=os.path.join(folder, "variables"),
                                  delete_old_dirs=True)
    shutil.rmtree(os.path.join(folder, "tmp"), ignore_errors=True)


def test_sharded_variables_convert_and_match_the_original(tmp_path, capsys):
    """The published LSTM with its variables in two shards: converts, verifies, and matches the original (itself
    run from the two shards by stock TensorFlow)."""
    from cudnn_port.exports.runners import onnx_session

    source = str(tmp_path / "sharded")
    reshard(os.path.join(REALWORLD, MODELS[0]), source)
    assert sorted(os.listdir(os.path.join(source, "variables"))) == [
        "variables.data-00000-of-00002", "variables.data-00001-of-00002", "variables.index"]
    out = converted_and_verified(capsys, source, tmp_path / "out")
    feeds = random_feeds(source, seed=32)
    want = original_serving(source, feeds)
    got = tf.saved_model.load(str(out / "saved_model")).signatures["serving_default"](**feeds)
    session = onnx_session(out / "model.onnx")
    onnx_got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    for key, value in want.items():
        np.testing.assert_allclose(got[key].numpy(), value, atol=ATOL, rtol=0, err_msg=f"SavedModel {key}")
        np.testing.assert_allclose(onnx_got[key], value, atol=ATOL, rtol=0, err_msg=f"ONNX {key}")
