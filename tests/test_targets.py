"""Each converted target, loaded by its own consumer on CPU, against the NumPy reference (fp32, ATOL_FP32).

- tf1: the converted checkpoint read back by name and run through TF1's cells as tests/tf1_cells.py writes them
  from their TensorFlow 1.15 definitions (LSTMBlockCell with forget_bias=0, gates i, c, f, o;
  CudnnCompatibleGRUCell), not from cudnn_port.
- keras: the .keras file loaded with plain Keras.
- pytorch: the safetensors file loaded strictly into stock torch.nn.LSTM / GRU
  (cudnn_port.formats.pytorch.torch_modules, which only builds the module and packs the batch).

Each config is converted once: one checkpoint holds a buffer per target, each with its own name and seed, and the
one conversion writes the three artifacts these tests read (checkpoint, keras, pytorch).
"""
import functools

import numpy as np
import pytest

from cudnn_port import convert, reference
from cudnn_port.layout import unpack
from helpers import CONFIG_IDS, CONFIGS, assert_all_close, assert_close, make_spec, ragged_batch, random_blob, \
    spec_flags, write_source
from tf1_cells import tf1_cells

tf = pytest.importorskip("tensorflow")
pytestmark = pytest.mark.slow  # a conversion per configuration
BUFFERS = {"tf1": ("cudnn_{mode}", 0), "keras": ("rnn", 1), "pytorch": ("enc", 2)}  # scope, seed offset


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """(mode, layers, bi) -> (spec, out, {target: (scope, its stack in the manifest, its buffer)}), made once."""

    @functools.lru_cache(maxsize=None)
    def one(mode, layers, bi):
        spec = make_spec(mode, layers, bi)
        scopes = {target: (scope.format(mode=mode), layers + offset) for target, (scope, offset) in BUFFERS.items()}
        blobs = {target: random_blob(spec, seed) for target, (_, seed) in scopes.items()}
        first, *others = scopes
        tmp = tmp_path_factory.mktemp(f"{mode}{layers}{bi}")
        src, _ = write_source(tmp, spec, name=f"{scopes[first][0]}/opaque_kernel", seed=scopes[first][1],
                              extra={f"{scopes[t][0]}/opaque_kernel": blobs[t] for t in others})
        manifest = convert(src, tmp / "out", formats=["checkpoint", "keras", "pytorch"], **spec_flags(spec))
        stacks = {s["variable"]: s for s in manifest["stacks"]}
        return spec, tmp / "out", {t: (scope, stacks[f"{scope}/opaque_kernel"], blobs[t])
                                   for t, (scope, _) in scopes.items()}

    return one


@pytest.mark.parametrize("mode,layers,bi", CONFIGS, ids=CONFIG_IDS)
def test_tf1_checkpoint_restores_into_cpu_cells(converted, mode, layers, bi):
    spec, out, stacks = converted(mode, layers, bi)
    scope, _, blob = stacks["tf1"]
    x, lengths, h_0, c_0 = ragged_batch(spec)
    want = reference.forward(unpack(spec, blob), x, lengths, h_0, c_0)
    got = tf1_cells(spec, scope, str(out / "checkpoint"), x, lengths, h_0, c_0 if mode == "lstm" else None)
    assert_all_close(got, want, "tf1")


@pytest.mark.parametrize("mode,layers,bi", CONFIGS, ids=CONFIG_IDS)
def test_keras_model_loads_and_matches(converted, mode, layers, bi):
    import keras

    spec, out, stacks = converted(mode, layers, bi)
    _, stack, blob = stacks["keras"]
    model = keras.saving.load_model(out / stack["artifacts"]["keras"])
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
def test_pytorch_state_dict_loads_and_matches(converted, mode, layers, bi):
    pytest.importorskip("torch")
    from safetensors.torch import load_file

    from cudnn_port.formats.pytorch import torch_modules

    spec, out, stacks = converted(mode, layers, bi)
    _, stack, blob = stacks["pytorch"]
    state = load_file(str(out / stack["artifacts"]["pytorch"]))
    x, lengths, h_0, c_0 = ragged_batch(spec)
    got = torch_modules(spec, state, x, lengths, h_0, c_0)  # load_state_dict is strict: every key, no extras
    assert_all_close(got, reference.forward(unpack(spec, blob), x, lengths, h_0, c_0), "pytorch")
