"""Each converted target, loaded by its own consumer on CPU, against the NumPy reference (fp32, ATOL_FP32).

- tf1: the converted checkpoint restored by name into a TF1 graph running the cells' math (LSTMBlockCell's
  BlockLSTM kernel with forget_bias=0, gates i, c, f, o; CudnnCompatibleGRUCell's matmuls), written here from the
  TF1 cell definitions, not from cudnn_port.
- keras: the .keras file loaded with plain Keras.
- pytorch: the safetensors file loaded into torch.nn.LSTM / GRU.
"""
import numpy as np
import pytest

from conftest import ATOL_FP32, CONFIG_IDS, CONFIGS, make_spec, ragged_batch, random_blob
from cudnn_port import reference
from cudnn_port import convert
from cudnn_port.layout import unpack
from cudnn_port.judging.stock import tf1_cells as tf1_graph_forward

tf = pytest.importorskip("tensorflow")


def write_source(tmp_path, spec, name="cudnn_lstm/opaque_kernel", seed=0, extra=None):
    from make_tf1_checkpoint import save_tf1

    blob = random_blob(spec, seed)
    variables = {name: blob, "dense/kernel": np.ones((3, 2), "float32"), "global_step": np.int64(7)}
    variables.update(extra or {})
    return save_tf1(str(tmp_path / "src" / "model.ckpt"), variables), blob


def spec_flags(spec):
    return dict(mode=spec.mode, num_layers=spec.num_layers, num_units=spec.num_units, input_size=spec.input_size,
                bidirectional=spec.bidirectional)


def assert_close(got, want, what):
    err = float(np.max(np.abs(np.asarray(got, np.float64) - want)))
    assert err <= ATOL_FP32, f"{what}: max abs error {err:.3g} > {ATOL_FP32}"


@pytest.mark.parametrize("mode,layers,bi", CONFIGS, ids=CONFIG_IDS)
def test_tf1_checkpoint_restores_into_cpu_cells(tmp_path, mode, layers, bi):
    spec = make_spec(mode, layers, bi)
    name = f"cudnn_{mode}/opaque_kernel"
    src, blob = write_source(tmp_path, spec, name=name, seed=layers)
    convert(src, tmp_path / "out", **spec_flags(spec))
    x, lengths, h_0, c_0 = ragged_batch(spec)
    want = reference.forward(unpack(spec, blob), x, lengths, h_0, c_0)
    got = tf1_graph_forward(spec, f"cudnn_{mode}", str(tmp_path / "out" / "checkpoint"), x, lengths, h_0, c_0)
    for what, g, w in zip(("outputs", "h_n", "c_n"), got, want):
        if w is not None:
            assert_close(g, w, f"tf1 {what}")


@pytest.mark.parametrize("mode,layers,bi", CONFIGS, ids=CONFIG_IDS)
def test_keras_model_loads_and_matches(tmp_path, mode, layers, bi):
    import keras

    spec = make_spec(mode, layers, bi)
    src, blob = write_source(tmp_path, spec, name="rnn/opaque_kernel", seed=layers + 1)
    manifest = convert(src, tmp_path / "out", style="keras", **spec_flags(spec))
    model = keras.saving.load_model(tmp_path / "out" / manifest["stacks"][0]["artifacts"]["keras"])
    x, lengths, _, _ = ragged_batch(spec)
    canon = unpack(spec, blob)
    want, _, _ = reference.forward(canon, x)  # the Keras model takes full-length batches
    assert_close(model.predict(x, verbose=0), want, "keras outputs")
    # Ragged: drive the loaded layers with a right-padded mask; compare the valid steps.
    mask = np.arange(x.shape[1])[None, :] < lengths[:, None]
    h = x
    for layer in model.layers[1:]:
        h = layer(h, mask=mask)
    want, _, _ = reference.forward(canon, x, lengths)
    assert_close(np.asarray(h) * mask[..., None], want, "keras masked outputs")


@pytest.mark.parametrize("mode,layers,bi", CONFIGS, ids=CONFIG_IDS)
def test_pytorch_state_dict_loads_and_matches(tmp_path, mode, layers, bi):
    pytest.importorskip("torch")
    from safetensors.torch import load_file

    from test_reference import run_torch

    spec = make_spec(mode, layers, bi)
    src, blob = write_source(tmp_path, spec, name="enc/opaque_kernel", seed=layers + 2)
    manifest = convert(src, tmp_path / "out", style="pytorch", **spec_flags(spec))
    state = load_file(str(tmp_path / "out" / manifest["stacks"][0]["artifacts"]["pytorch"]))
    x, lengths, h_0, c_0 = ragged_batch(spec)
    got = run_torch(spec, state, x, lengths, h_0, c_0)  # load_state_dict is strict: every key, no extras
    want = reference.forward(unpack(spec, blob), x, lengths, h_0, c_0)
    assert_close(got[0], want[0], "pytorch outputs")
    assert_close(got[1], want[1], "pytorch h_n")
    if mode == "lstm":
        assert_close(got[2], want[2], "pytorch c_n")
