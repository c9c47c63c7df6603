"""Messages in the user's terms: a mistyped path gets the nearest existing name, a folder holding a model file names
it, an unknown flag gets the nearest valid one, --help covers every source kind and every flag, and inspect / convert
speak of the user's layers and the artifacts' inputs, not of cuDNN buffers."""
import os
import shutil

import pytest

from helpers import ROOT, assert_clean_error, refused, run_cli

FIRST = os.path.join(ROOT, "models", "first_model")


@pytest.mark.parametrize("typed, meant", [("model.kears", "model.keras"), ("modle.h5", "model.h5")])
def test_a_mistyped_model_file_names_the_nearest_one(tmp_path, capsys, typed, meant):
    shutil.copy(os.path.join(FIRST, "model.h5"), tmp_path / "model.h5")
    shutil.copy(os.path.join(FIRST, "model.keras"), tmp_path / "model.keras")
    line = refused(capsys, ["convert", tmp_path / typed, tmp_path / "out"], "no such file", "did you mean",
                   paths=[tmp_path])
    assert line.endswith(f"{tmp_path / meant}?"), line
    assert not (tmp_path / "out").exists()


def test_a_mistyped_checkpoint_prefix_names_the_nearest_one(capsys, tmp_path):
    prefix = os.path.join(ROOT, "models", "tf1_bilstm", "model.ckp")
    line = refused(capsys, ["convert", prefix, tmp_path / "out"], "checkpoint not found", paths=[prefix])
    assert line.endswith(f"did you mean {prefix}t?"), line


def test_a_folder_holding_a_model_file_names_it(capsys, tmp_path):
    refused(capsys, ["convert", FIRST, tmp_path / "out"], "is a folder holding model.h5 and model.keras",
            os.path.join(FIRST, "model.h5"), paths=[FIRST])


@pytest.mark.parametrize("argv, meant", [(["convert", "a.keras", "out", "--forse"], "--force"),
                                         (["verify", "out", "--atoll", "1"], "--atol"),
                                         (["convert", "a.keras", "out", "--qunatize", "int8"], "--quantize")])
def test_an_unknown_flag_gets_the_nearest_valid_one(capsys, argv, meant):
    refused(capsys, argv, "unrecognized arguments", f"did you mean {meant}?")


def test_help_covers_every_source_kind_and_every_flag_has_help():
    from cudnn_port.cli_args import SOURCE_HELP, build_parser

    for kind in (".keras", ".h5", "LSTM / GRU / Bidirectional", "CuDNNLSTM", "SavedModel", "checkpoint"):
        assert kind in SOURCE_HELP, kind
    parser = build_parser()
    for name, command in parser._subparsers._group_actions[0].choices.items():
        for action in command._actions:
            if not action.option_strings or action.help == "==SUPPRESS==" or action.dest == "help":
                continue  # positionals are checked above; a suppressed alias is no flag of --help
            assert action.help and action.help.strip(), f"{name} {action.option_strings} has no help text"
            if action.default not in (None, False):
                assert "default" in action.help.lower(), (name, action.option_strings, action.help)


def test_inspect_and_convert_speak_of_the_users_layers(capsys, tmp_path):
    code, out, err = run_cli(capsys, "inspect", os.path.join(FIRST, "model.h5"))
    assert code == 0, err
    assert "LSTM 'lstm' (1-layer unidirectional LSTM, input 16, hidden 32" in out, out
    assert "fused ONNX LSTM, TFLite UNIDIRECTIONAL_SEQUENCE_LSTM" in out, out
    assert "every artifact takes input_layer int32 [batch, time]" in out, out
    assert "opaque_kernel" not in out and "--num-units" not in out, out
    code, out, err = run_cli(capsys, "inspect", os.path.join(FIRST, "model.h5"), "--verbose")
    assert code == 0 and "lstm/lstm/opaque_kernel" in out, out  # the buffer, for those who ask


def test_an_h5_that_keras_itself_cannot_load_says_so_and_how_to_save_it(capsys, tmp_path):
    """Keras 3 saves a mixed-precision model's mask (Embedding(mask_zero)) in .h5 as a 'NotEqual' layer it cannot
    read back: the refusal says Keras cannot load it and how to save a file it can."""
    import keras

    L = keras.layers
    before = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_float16")
    try:
        ids = keras.Input((None,), dtype="int32")
        model = keras.Model(ids, L.Dense(1)(L.LSTM(4)(L.Embedding(20, 8, mask_zero=True)(ids))))
    finally:
        keras.config.set_dtype_policy(before)
    model.save(tmp_path / "m.h5")
    code, _, err = run_cli(capsys, "convert", tmp_path / "m.h5", tmp_path / "out")
    assert_clean_error(code, err, "Keras itself cannot load", "'NotEqual'", "save the model as .keras (")
    assert not (tmp_path / "out").exists()


def test_an_empty_model_file_is_called_empty_not_missing(capsys, tmp_path):
    """A 0-byte model.h5 was answered "no such file: model.h5; did you mean model.h5?"."""
    (tmp_path / "model.h5").write_bytes(b"")
    line = refused(capsys, ["convert", tmp_path / "model.h5", tmp_path / "out"], "is empty (0 bytes)",
                   "save the model again", paths=[tmp_path])
    assert "did you mean" not in line and "no such file" not in line, line
    (tmp_path / "other.h5").write_bytes(b"not hdf5")
    refused(capsys, ["inspect", tmp_path / "other.h5"], "is not an HDF5 file", paths=[tmp_path])
    assert not (tmp_path / "out").exists()


def test_a_folder_named_like_a_keras_file_is_called_a_folder(capsys, tmp_path):
    """A folder x.keras holding an unzipped .keras archive was sent to x.keras/model.weights.h5 (weights only,
    refused next); one holding a model file names that file."""
    import zipfile

    unpacked = tmp_path / "x.keras"
    with zipfile.ZipFile(os.path.join(FIRST, "model.keras")) as archive:
        archive.extractall(unpacked)
    line = refused(capsys, ["convert", unpacked, tmp_path / "out"], "is a folder, not a .keras file",
                   "an unpacked .keras archive", "zip ../model.keras *", paths=[tmp_path])
    assert "model.weights.h5" not in line, line
    holder = tmp_path / "y.keras"
    holder.mkdir()
    shutil.copy(os.path.join(FIRST, "model.keras"), holder / "model.keras")
    refused(capsys, ["inspect", holder], "is a folder, not a .keras file", f"e.g. {holder / 'model.keras'}",
            paths=[tmp_path])
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", ["nan_kernel", "complex_input"])
def test_values_no_artifact_can_take_are_refused_before_the_export(capsys, tmp_path, case):
    """A NaN in a Dense kernel ended after the whole export as exit 1 "parity FAILED ..."; a complex128 input as an
    internal error. Both are one line, exit 2, before anything is written."""
    import keras
    import numpy as np

    L = keras.layers
    x = keras.Input((3, 4), dtype="complex128" if case == "complex_input" else "float32", name="x")
    model = keras.Model(x, L.Dense(2, name="head")(L.Bidirectional(L.GRU(5))(L.LSTM(6, return_sequences=True)(x))))
    rng = np.random.default_rng(4)
    weights = [rng.normal(size=w.shape).astype(w.dtype) for w in model.get_weights()]
    if case == "nan_kernel":
        weights[-2][1, 0] = np.nan  # the head's kernel
    model.set_weights(weights)
    model.save(tmp_path / "m.keras")
    needles = ["weight 'head/kernel' holds 1 NaN/Inf value", "the training run diverged"] \
        if case == "nan_kernel" else ["input 'x' is complex128", "float32 keras.Input"]
    refused(capsys, ["convert", tmp_path / "m.keras", tmp_path / "out"], *needles, paths=[tmp_path])
    assert not (tmp_path / "out").exists()
