"""Inputs users already have (issue: read TF1 contrib checkpoints, Keras 2 CuDNN h5 files, SavedModels with
cuDNN nodes): each one inspected, converted, and its artifacts checked against the NumPy reference."""
import os

import numpy as np
import pytest

from conftest import CONFIG_IDS, CONFIGS, make_spec, ragged_batch, random_blob, tree_hash
from cudnn_port import reference
from cudnn_port.converter import convert, inspect_checkpoint
from cudnn_port.layout import unpack
from cudnn_port.verify import verify
from test_convert import assert_clean_error, run_cli
from test_targets import assert_close, tf1_graph_forward, write_source

tf = pytest.importorskip("tensorflow")


# ------------------------------------------------------------------ TF1 contrib: the older bias_cudnn_0/1 names

def legacy_tf1_tensors(canon, prefix):
    """What older tf.contrib.cudnn_rnn saveables wrote for a unidirectional LSTM, written here from their
    definition: ``{prefix}/multi_rnn_cell/cell_{l}/cudnn_compatible_lstm_cell/`` with ``kernel`` =
    transpose(concat_g [W_g R_g]) and the biases in gate order i, c, f, o; ``bias`` = ``bias_cudnn_0`` (b_W)
    + ``bias_cudnn_1`` (b_R)."""
    icfo = [0, 2, 1, 3]  # positions of i, c, f, o in cuDNN's i, f, c, o
    out = {}
    for layer, _, p in canon.pseudo_layers():
        scope = f"{prefix}/multi_rnn_cell/cell_{layer}/cudnn_compatible_lstm_cell"
        out[f"{scope}/kernel"] = np.concatenate([np.concatenate([p.W[g], p.R[g]], 1) for g in icfo], 0).T.copy()
        b_in, b_rec = (np.concatenate([b[g] for g in icfo]) for b in (p.b_W, p.b_R))
        out.update({f"{scope}/bias": b_in + b_rec, f"{scope}/bias_cudnn_0": b_in, f"{scope}/bias_cudnn_1": b_rec})
    return out


def test_tf1_legacy_bias_cudnn_names_are_read_checked_and_kept(tmp_path):
    spec = make_spec("lstm", 2, False)
    blob = random_blob(spec, seed=11)
    canon = unpack(spec, blob)
    legacy = legacy_tf1_tensors(canon, "cudnn_lstm")
    src, _ = write_source(tmp_path, spec, name="cudnn_lstm/opaque_kernel", seed=11, extra=legacy)
    before = tree_hash(os.path.dirname(src))

    report = inspect_checkpoint(src)
    assert report["stacks"][0]["spec"] == spec.to_dict()
    manifest = convert(src, tmp_path / "out")  # the stored tensors settle the spec: no flags
    stack = manifest["stacks"][0]
    assert stack["spec"] == spec.to_dict() and "canonical tensors" in stack["spec_source"]
    assert stack["scheme"] == "legacy"
    # Every stored tensor, bias_cudnn_0/1 included, was compared with the buffer and agrees.
    assert sorted(manifest["replaced"]) == sorted(legacy)
    assert all(v["agrees"] for v in manifest["replaced"].values())
    # The output keeps the older names (the graph that saved them restores them) and nothing under rnn/.
    assert sorted(stack["targets"]) == sorted(legacy)
    from cudnn_port.checkpoint import Checkpoint

    out = Checkpoint(tmp_path / "out" / "checkpoint")
    assert not any("/rnn/" in n for n in out.names)
    for name, want in legacy.items():
        np.testing.assert_allclose(out.get(name), want, rtol=0, atol=1e-7)

    x, lengths, h_0, c_0 = ragged_batch(spec)
    want = reference.forward(canon, x, lengths, h_0, c_0)
    got = tf1_graph_forward(spec, "cudnn_lstm", str(tmp_path / "out" / "checkpoint"), x, lengths, h_0, c_0,
                            legacy=True)
    for what, g, w in zip(("outputs", "h_n", "c_n"), got, want):
        assert_close(g, w, f"legacy tf1 {what}")
    # With the source gone, verify judges with the legacy tensors read back: b_W and b_R come back apart.
    os.rename(os.path.dirname(src), str(tmp_path / "moved"))
    report = verify(tmp_path / "out")
    assert report["passed"] and "converted checkpoint" in report["rows"][0]["judge"], report
    os.rename(str(tmp_path / "moved"), os.path.dirname(src))
    assert tree_hash(os.path.dirname(src)) == before


def test_tf1_disagreeing_canonical_tensors_are_reported(tmp_path):
    """A checkpoint whose stored canonical tensors do not match its buffer (e.g. edited by hand) is converted from
    the buffer, and the manifest says which tensors disagree and by how much."""
    spec = make_spec("lstm", 1, False)
    canon = unpack(spec, random_blob(spec, seed=12))
    legacy = legacy_tf1_tensors(canon, "cudnn_lstm")
    legacy["cudnn_lstm/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/bias_cudnn_1"] += 0.5
    src, _ = write_source(tmp_path, spec, name="cudnn_lstm/opaque_kernel", seed=12, extra=legacy)
    manifest = convert(src, tmp_path / "out")
    bad = {k: v for k, v in manifest["replaced"].items() if not v["agrees"]}
    assert list(bad) == ["cudnn_lstm/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/bias_cudnn_1"]
    assert abs(bad[list(bad)[0]]["max_abs_diff"] - 0.5) < 1e-6


# ------------------------------------------------------------------------------ Keras 2 CuDNNLSTM / CuDNNGRU h5

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
KERAS2_MODEL = os.path.join(FIXTURES, "keras2_cudnn_model.h5")
KERAS2_WEIGHTS = os.path.join(FIXTURES, "keras2_cudnn_weights.h5")
KERAS2_LAYERS = {"bi_lstm": make_spec("lstm", 1, True, input_size=6, hidden=5),
                 "lstm": make_spec("lstm", 1, False, input_size=10, hidden=7),
                 "bi_gru": make_spec("gru", 1, True, input_size=7, hidden=4),
                 "gru": make_spec("gru", 1, False, input_size=8, hidden=3)}


@pytest.fixture(scope="module")
def keras2_expected():
    """Outputs of each RNN layer and of the whole model, computed by tf_keras after tf_keras's own loader converted
    the CuDNN weights into LSTM / GRU layers (tests/fixtures/make_keras2_h5.py): the judge is not cudnn-port."""
    with np.load(os.path.join(FIXTURES, "keras2_expected.npz")) as data:
        return dict(data)


@pytest.mark.parametrize("path", [KERAS2_MODEL, KERAS2_WEIGHTS], ids=["full-model", "weights-only"])
def test_keras2_h5_layers_read_as_tf_keras_reads_them(path, keras2_expected):
    from cudnn_port.readers import open_source

    source = open_source(path)
    assert sorted(source.specs) == sorted(f"{layer}/opaque_kernel" for layer in KERAS2_LAYERS)
    for layer, spec in KERAS2_LAYERS.items():
        canon = source.canonical[f"{layer}/opaque_kernel"]
        assert canon.spec == spec
        got, _, _ = reference.forward(canon, keras2_expected[f"{layer}/inputs"])
        assert_close(got, keras2_expected[f"{layer}/outputs"], f"{layer} vs tf_keras")
    assert sorted(source.names) == sorted(["embedding/embeddings", "head/kernel", "head/bias"]
                                          + [f"{layer}/opaque_kernel" for layer in KERAS2_LAYERS])


def test_keras2_full_model_becomes_a_keras3_model_and_every_artifact_passes(tmp_path, keras2_expected):
    import keras

    before = tree_hash(FIXTURES)
    manifest = convert(KERAS2_MODEL, tmp_path / "out")  # no flags: the shapes state every spec
    assert manifest["style"] == "keras" and manifest["model_artifacts"] == {"keras": "keras/model.keras"}
    assert "Keras 2 HDF5 (full model" in manifest["source"]["format"]
    assert sorted(manifest["copied"]) == ["embedding/embeddings", "head/bias", "head/kernel"]
    for stack in manifest["stacks"]:
        assert sorted(stack["artifacts"]) == ["graphdef", "keras", "onnx", "saved_model"]
        assert "spec exact from its weight shapes" in stack["spec_source"]
    model = keras.saving.load_model(tmp_path / "out" / "keras" / "model.keras")
    kinds = [type(layer).__name__ for layer in model.layers]
    assert kinds == ["Embedding", "Bidirectional", "LSTM", "Bidirectional", "GRU", "Dense"]
    assert_close(model.predict(keras2_expected["ids"], verbose=0), keras2_expected["outputs"], "Keras 3 model")
    report = verify(tmp_path / "out")
    assert report["passed"] and len([r for r in report["rows"] if r["passed"]]) == 4 * 4, report
    assert tree_hash(FIXTURES) == before


def test_keras2_weights_file_converts_per_layer(tmp_path, keras2_expected):
    manifest = convert(KERAS2_WEIGHTS, tmp_path / "out", style="pytorch")
    assert manifest["model_artifacts"] == {} and "weights only" in manifest["source"]["format"]
    assert [s["spec"] for s in manifest["stacks"]] == [spec.to_dict() for spec in KERAS2_LAYERS.values()]
    assert verify(tmp_path / "out")["passed"]


def test_inspect_says_what_it_found_in_an_h5_file(capsys):
    code, out, err = run_cli(capsys, "inspect", KERAS2_MODEL)
    assert code == 0, err
    assert "Keras 2 HDF5 (full model" in out
    assert "bi_gru/opaque_kernel" in out and "Bidirectional(CuDNNGRU)" in out and "converts as" in out


def test_h5_of_another_kind_of_model_says_so(tmp_path, capsys):
    code, _, err = run_cli(capsys, "convert", os.path.join(FIXTURES, "keras2_dense_only.h5"), tmp_path / "out")
    assert_clean_error(code, err, "holds no CuDNNLSTM/CuDNNGRU layer", "dense")
    assert not (tmp_path / "out").exists()


def test_hdf5_that_is_not_keras_and_truncated_h5(tmp_path, capsys):
    import h5py

    plain = tmp_path / "data.h5"
    with h5py.File(plain, "w") as f:
        f["x"] = np.arange(3.0)
    code, _, err = run_cli(capsys, "convert", plain, tmp_path / "out")
    assert_clean_error(code, err, "not a Keras model or weights file")
    cut = tmp_path / "cut.h5"
    cut.write_bytes(open(KERAS2_MODEL, "rb").read()[:4000])
    code, _, err = run_cli(capsys, "inspect", cut)
    assert_clean_error(code, err, "cannot read", "complete Keras .h5 file")


# ------------------------------------------------------------------ SavedModels holding CudnnRNN / V2 / V3 nodes

OP_VARIANTS = [("CudnnRNN", True), ("CudnnRNNV2", True), ("CudnnRNNV3", True), ("CudnnRNNV3", False)]
OP_IDS = ["v1", "v2", "v3-time-major", "v3-batch-major"]


def _to_op_layout(array, time_major, state=False):
    """Reference layouts (batch-major x, states [L*D, B, H]) -> the op's layout."""
    if array is None:
        return None
    if state:
        return array if time_major else np.transpose(array, (1, 0, 2))
    return np.transpose(array, (1, 0, 2)) if time_major else array


@pytest.mark.parametrize("op,time_major", OP_VARIANTS, ids=OP_IDS)
@pytest.mark.parametrize("mode,layers,bi", CONFIGS, ids=CONFIG_IDS)
def test_cpu_replacement_of_a_cudnn_op_matches_reference(mode, layers, bi, op, time_major):
    """The function that replaces a cuDNN node, fed the op's own inputs (params as a tensor), in the op's layout."""
    from cudnn_port.readers.saved_model import FORWARD_OPS
    from cudnn_port.tf_graph import cudnn_op_cpu

    spec = make_spec(mode, layers, bi)
    blob = random_blob(spec, seed=layers + 20)
    x, lengths, h_0, c_0 = ragged_batch(spec)
    if op != "CudnnRNNV3":  # no sequence_lengths before V3: full-length sequences
        x, lengths = np.random.default_rng(3).normal(size=x.shape).astype("float32"), None
    want = reference.forward(unpack(spec, blob), x, lengths, h_0, c_0)
    args = [_to_op_layout(x, time_major), _to_op_layout(h_0, time_major, True),
            _to_op_layout(c_0, time_major, True) if mode == "lstm" else np.zeros([], "float32"), blob]
    if lengths is not None:
        args.append(lengths)
    fn = tf.function(lambda *a: cudnn_op_cpu(spec, time_major, FORWARD_OPS[op], *a), autograph=False)
    got = [t.numpy() for t in fn(*args)]
    assert len(got) == FORWARD_OPS[op]
    assert_close(_to_op_layout(got[0], time_major), want[0], "output")
    assert_close(_to_op_layout(got[1], time_major, True), want[1], "output_h")
    if mode == "lstm":
        assert_close(_to_op_layout(got[2], time_major, True), want[2], "output_c")
