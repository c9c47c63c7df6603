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
from cudnn_port.converter import convert
from cudnn_port.layout import unpack
from cudnn_port.targets import tf1 as tf1_target

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


def tf1_graph_forward(spec, prefix, ckpt_dir, x, lengths, h_0, c_0, legacy=False):
    """Restore TF1 cell variables by name and run them like dynamic_rnn / stack_bidirectional_dynamic_rnn
    (``legacy``: under the older ``{prefix}/multi_rnn_cell/…`` names)."""
    H, D = spec.num_units, spec.num_dirs
    graph = tf.Graph()
    with graph.as_default():
        v1 = tf.compat.v1
        seq = tf.transpose(tf.constant(x), [1, 0, 2])  # time-major [T, B, I]
        lens = tf.constant(lengths.astype(np.int64))
        valid = tf.sequence_mask(lens, x.shape[1], dtype=tf.float32)  # [B, T]
        valid_tm = tf.transpose(valid)[:, :, None]
        restore, h_list, c_list = [], [], []
        layer_in = seq
        for layer in range(spec.num_layers):
            outs = []
            for direction in range(D):
                p = layer * D + direction
                scope = tf1_target.cell_scope(prefix, spec, layer, direction, legacy)
                width = spec.layer_input_size(layer)
                inp = tf.reverse_sequence(layer_in, lens, seq_axis=0, batch_axis=1) if direction else layer_in
                h0, c0 = tf.constant(h_0[p]), tf.constant(c_0[p])
                if spec.mode == "lstm":
                    kernel = v1.get_variable(f"{scope}/kernel", [width + H, 4 * H], use_resource=False)
                    bias = v1.get_variable(f"{scope}/bias", [4 * H], use_resource=False)
                    restore += [kernel, bias]
                    zeros = tf.zeros([H])
                    _, cs, _, _, _, _, h = tf.raw_ops.BlockLSTM(
                        seq_len_max=tf.constant(x.shape[1], tf.int64), x=inp, cs_prev=c0, h_prev=h0, w=kernel,
                        wci=zeros, wcf=zeros, wco=zeros, b=bias, forget_bias=0.0, cell_clip=-1.0, use_peephole=False)
                else:
                    names = ["gates/kernel", "gates/bias", "candidate/input_projection/kernel",
                             "candidate/input_projection/bias", "candidate/hidden_projection/kernel",
                             "candidate/hidden_projection/bias"]
                    shapes = [[width + H, 2 * H], [2 * H], [width, H], [H], [H, H], [H]]
                    gk, gb, ik, ib, hk, hb = [v1.get_variable(f"{scope}/{n}", s, use_resource=False)
                                              for n, s in zip(names, shapes)]
                    restore += [gk, gb, ik, ib, hk, hb]
                    steps, state = [], h0
                    inp_valid = tf.reverse_sequence(valid_tm, lens, seq_axis=0, batch_axis=1) if direction else valid_tm
                    for t in range(x.shape[1]):
                        xt = inp[t]
                        gates = tf.sigmoid(tf.matmul(tf.concat([xt, state], 1), gk) + gb)
                        r, u = tf.split(gates, 2, axis=1)
                        cand = tf.tanh(tf.matmul(xt, ik) + ib + r * (tf.matmul(state, hk) + hb))
                        new = u * state + (1 - u) * cand
                        state = inp_valid[t] * new + (1 - inp_valid[t]) * state
                        steps.append(state)
                    h, cs = tf.stack(steps), None
                # Final state: the state at step length-1 of this (possibly reversed) sequence.
                last = tf.stack([tf.clip_by_value(lens - 1, 0, x.shape[1]), tf.range(x.shape[0], dtype=tf.int64)], 1)
                h_list.append(tf.gather_nd(h, last))
                if cs is not None:
                    c_list.append(tf.gather_nd(cs, last))
                if direction:
                    h = tf.reverse_sequence(h, lens, seq_axis=0, batch_axis=1)
                outs.append(h * valid_tm)
            layer_in = tf.concat(outs, axis=2)
        outputs = tf.transpose(layer_in, [1, 0, 2])
        saver = v1.train.Saver(var_list=restore)
        with v1.Session(graph=graph) as sess:
            saver.restore(sess, tf.train.latest_checkpoint(ckpt_dir))
            fetched = sess.run([outputs, tf.stack(h_list)] + ([tf.stack(c_list)] if c_list else []))
    return fetched + ([None] if not c_list else [])


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
    src, blob = write_source(tmp_path, spec, name=f"rnn/opaque_kernel", seed=layers + 1)
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
