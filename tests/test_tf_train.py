"""The fused layers' CPU training path (``tf_train.stack_train``, a hand-written backward pass) against two judges
that share none of its code: PyTorch's CPU LSTM/GRU (outputs, final states and every gradient) and TensorFlow's
autodiff of the export path ``tf_graph.stack_forward`` (with a function between layers, as dropout is).

Tolerance 1e-5 absolute: on these sizes (|values| ~1, 7 steps) two fp32 implementations that sum in different
orders differ by ~1e-7 to 1e-6 (measured); a wrong gate, sign, step or mask differs by 1e-2 or more. At a larger
size, both CPU paths against a float64 truth: within twice the error of PyTorch's float32 kernels (the fp32 floor),
which catches a loss of precision that stays below 1e-5 on the small sizes; and so, at a real model's size (3
layers, both directions, hidden 128, 60 steps), the fused layer's training path as ``fit`` calls it."""
import numpy as np
import pytest

from helpers import CONFIGS, CONFIG_IDS, assert_all_close, make_spec, ragged_batch, random_blob, torch_grads

tf = pytest.importorskip("tensorflow")

from cudnn_port.tf_graph import stack_forward, unpack_tensor  # noqa: E402
from cudnn_port.tf_train import stack_train  # noqa: E402

TOL = 1e-5
NAMES = ("outputs", "h_n", "c_n", "d buffer", "dx", "dh0", "dc0")


def run(step, spec, blob, x, lengths, h0, c0, upstream, between=None):
    """(outputs, h_n, c_n) and the gradients (buffer, x, h0, c0) of sum(outputs * gy) + sum(h_n * gh) + sum(c_n * gc)
    through ``step`` (stack_train or stack_forward)."""
    gy, gh, gc = upstream
    params, x, h0, c0 = (tf.Variable(v) for v in (blob, x, h0, c0))
    with tf.GradientTape() as tape:
        y, h, c = step(unpack_tensor(spec, params), x, lengths, h0, c0 if spec.mode == "lstm" else None, between)
        loss = tf.reduce_sum(y * gy) + tf.reduce_sum(h * gh) + (tf.reduce_sum(c * gc) if c is not None else 0.0)
    grads = tape.gradient(loss, [params, x, h0, c0])
    forward = [None if t is None else t.numpy() for t in (y, h, c)]
    return forward, [None if g is None else g.numpy() for g in grads]


def upstream_for(spec, x, seed):
    rng = np.random.default_rng(seed)
    batch, steps = x.shape[:2]
    gy = rng.normal(size=(batch, steps, spec.num_dirs * spec.num_units)).astype("float32")
    states = (spec.num_pseudo_layers, batch, spec.num_units)
    return gy, rng.normal(size=states).astype("float32"), rng.normal(size=states).astype("float32")


@pytest.mark.parametrize("mode,layers,bi", CONFIGS, ids=CONFIG_IDS)
@pytest.mark.slow
def test_stack_train_matches_pytorch(mode, layers, bi):
    spec = make_spec(mode, layers, bi)
    blob = random_blob(spec, seed=71)
    x, lengths, h0, c0 = ragged_batch(spec, seed=72)
    upstream = upstream_for(spec, x, seed=73)
    forward, grads = run(stack_train, spec, blob, x, lengths, h0, c0, upstream)
    gy = upstream[0] * (np.arange(x.shape[1])[None, :, None] < lengths[:, None, None])  # torch pads with zeros
    judge_forward, judge_grads = torch_grads(spec, blob, x, lengths, h0, c0, gy, upstream[1],
                                             upstream[2] if mode == "lstm" else None)
    mask = (np.arange(x.shape[1])[None, :] < lengths[:, None])[..., None]
    forward[0] = forward[0] * mask
    grads[1] = grads[1] * mask  # padded steps: no input reaches an output in either
    assert_all_close(forward + grads, judge_forward + judge_grads, "stack_train vs PyTorch", NAMES, TOL)


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_stack_train_matches_autodiff_of_the_export_path_with_a_function_between_layers(mode):
    spec = make_spec(mode, 3, True, input_size=7, hidden=4)
    blob = random_blob(spec, seed=81)
    x, lengths, h0, c0 = ragged_batch(spec, seed=82)
    upstream = upstream_for(spec, x, seed=83)

    def between(y, layer):
        return tf.tanh(y) * (0.5 + layer)

    ours = run(stack_train, spec, blob, x, lengths, h0, c0, upstream, between)
    judge = run(stack_forward, spec, blob, x, lengths, h0, c0, upstream, between)
    assert_all_close(ours[0] + ours[1], judge[0] + judge[1], "stack_train vs autodiff of stack_forward", NAMES,
                     TOL)


FLOOR_FACTOR = 2.0  # measured 0.84x-1.49x here; 0.74x-1.24x at 50 steps over 3 seeds (both modes and paths)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_both_cpu_paths_stay_within_twice_the_fp32_floor_of_a_float64_truth(mode):
    """Both CPU paths of the fused layers (training: stack_train; inference and export: autodiff of stack_forward)
    on a 3-layer bidirectional stack at a size where float32 rounding is well above a few ulps (hidden 48, input 32,
    40 steps, ragged batch, non-zero states, weights uniform in [-0.6, 0.6] as in tests/fixtures/cudnn).

    Truth: PyTorch's CPU kernels in float64. Floor: PyTorch's CPU kernels in float32, the error any float32
    implementation of this math makes. Rule: for each of outputs, h_n, c_n and the gradients w.r.t. the buffer,
    inputs, h0 and c0, the root-mean-square distance from the truth is at most FLOOR_FACTOR times the floor's. RMS,
    not the maximum: the maximum of one array moved between 0.3x and 2.0x of the floor's across seeds on
    unchanged code. Measured at 50 steps: the saved activations rounded to float16 put every array at 500x-1600x
    the floor; dR summed in one product over all steps, or a bias gradient in one sum, moved no ratio by 1%."""
    spec = make_spec(mode, 3, True, input_size=32, hidden=48)
    rng = np.random.default_rng(64)
    blob = rng.uniform(-0.6, 0.6, spec.param_count).astype("float32")
    x, lengths, h0, c0 = ragged_batch(spec, steps=40, seed=65)
    gy, gh, gc = upstream_for(spec, x, seed=66)
    valid = np.arange(x.shape[1])[None, :] < lengths[:, None]
    gy = gy * valid[..., None]  # torch pads with zeros: nothing past a length reaches the loss
    lstm = mode == "lstm"
    judge = [c0 if lstm else None, gy, gh, gc if lstm else None]
    truth = torch_grads(spec, blob, x, lengths, h0, *judge, dtype="float64")
    floor = torch_grads(spec, blob, x, lengths, h0, *judge)

    def rms(got, want):
        return float(np.sqrt(np.mean((np.asarray(got, np.float64) - want) ** 2)))

    for step in (stack_train, stack_forward):
        forward, grads = run(step, spec, blob, x, lengths, h0, c0, (gy, gh, gc))
        ratios = {name: rms(got, want) / rms(low, want)
                  for name, got, low, want in zip(NAMES, forward + grads, floor[0] + floor[1], truth[0] + truth[1])
                  if want is not None}
        assert len(ratios) == (7 if lstm else 5), ratios
        worst = max(ratios, key=ratios.get)
        assert ratios[worst] <= FLOOR_FACTOR, (f"{step.__name__}: {worst} at {ratios[worst]:.2f}x the fp32 floor "
                                               f"(bound {FLOOR_FACTOR}x): "
                                               + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))


REALISTIC_FACTOR = 2.0  # measured with float32 tanh on an Intel Xeon: 1.00x-1.16x on this case, 0.98x-1.20x at two
# other seeds (LSTM outputs highest), 1.87x with the lowest versions; on an AMD EPYC the lowest versions' float32
# tanh put LSTM outputs at 2.05x. With the LSTM loop's tanh(c) computed in float64, there: 1.01x-1.45x (LSTM outputs
# 1.23x), and 1.01x-1.52x (1.46x) with the lowest versions (docs/performance.md, "The training path's sigmoid")


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_fused_layer_training_path_within_twice_the_fp32_floor_at_a_realistic_size(mode):
    """The fused layer's CPU training path as ``fit`` calls it (``CudnnLSTM`` / ``CudnnGRU``, ``training=True``, a
    right-padded mask, initial states passed) at the size of a real model: 3 layers, both directions, input 80,
    hidden 128, 60 steps, batch 4 with lengths 60, 1, 37, 57, non-zero states, weights uniform in [-0.1, 0.1]
    (PyTorch's default init for hidden 128 is [-0.088, 0.088]).

    Truth: PyTorch's CPU kernels in float64, the buffer mapped to its parameters. Floor: the same kernels in
    float32. Rule: for outputs, h_n, c_n and the gradients w.r.t. the buffer, inputs, h0 and c0, the RMS distance
    from the truth is at most REALISTIC_FACTOR times the floor's (RMS, not the maximum: the outputs' largest error
    is one or two ulps, and their maximum ratio moves between 1.8x and 2.2x with the seed on unchanged code).
    Measured with the training loops changed: ``tf.sigmoid`` (TensorFlow 2.21's, 0.82 ulps from the exact value on
    average; the loops' form before :func:`cudnn_port.tf_train._sigmoid`) put LSTM outputs at 1.41x, within the
    bound; tanh computed as ``2 * sigmoid(2x) - 1`` put them at 8.0x, and gate activations rounded to float16
    every array at 675x or more: both fail."""
    import keras

    from cudnn_port.layers import CudnnGRU, CudnnLSTM

    pytest.importorskip("torch")
    lstm = mode == "lstm"
    spec = make_spec(mode, 3, True, input_size=80, hidden=128)
    rng = np.random.default_rng(630 + lstm)
    blob = rng.uniform(-0.1, 0.1, spec.param_count).astype("float32")
    lengths = np.array([60, 1, 37, 57], np.int32)
    valid = np.arange(60)[None, :] < lengths[:, None]
    x = (rng.normal(size=(4, 60, 80)) * valid[..., None]).astype("float32")
    h0, c0 = (rng.normal(size=(6, 4, 128)).astype("float32") * 0.5 for _ in range(2))
    gy, gh, gc = upstream_for(spec, x, seed=632)
    gy = gy * valid[..., None]  # torch pads with zeros: nothing past a length reaches the loss
    judge = [c0 if lstm else None, gy, gh, gc if lstm else None]
    truth = torch_grads(spec, blob, x, lengths, h0, *judge, dtype="float64")
    floor = torch_grads(spec, blob, x, lengths, h0, *judge)

    keras.utils.set_random_seed(633)
    layer = (CudnnLSTM if lstm else CudnnGRU)(128, num_layers=3, bidirectional=True, return_sequences=True,
                                                return_state=True)
    layer.build(x.shape)
    layer.opaque_kernel.assign(blob)
    xv = tf.Variable(x)
    hv, cv = (tf.Variable(np.ascontiguousarray(np.swapaxes(s, 0, 1))) for s in (h0, c0))  # the layer's [B, L*D, H]
    with tf.GradientTape() as tape:
        y, *states = layer(xv, initial_state=[hv, cv] if lstm else [hv], mask=tf.constant(valid), training=True)
        h = tf.transpose(states[0], [1, 0, 2])  # back to [L*D, B, H], as PyTorch's
        c = tf.transpose(states[1], [1, 0, 2]) if lstm else None
        loss = tf.reduce_sum(y * gy) + tf.reduce_sum(h * gh) + (tf.reduce_sum(c * gc) if lstm else 0.0)
    d_buffer, dx, dh0, dc0 = tape.gradient(loss, [layer.opaque_kernel, xv, hv, cv])
    got = [y.numpy(), h.numpy(), None if c is None else c.numpy(),
           d_buffer.numpy(), dx.numpy(), np.swapaxes(dh0.numpy(), 0, 1), None if dc0 is None else
           np.swapaxes(dc0.numpy(), 0, 1)]

    def rms(a, want):
        return float(np.sqrt(np.mean((np.asarray(a, np.float64) - want) ** 2)))

    ratios = {name: rms(ours, want) / rms(low, want)
              for name, ours, low, want in zip(NAMES, got, floor[0] + floor[1], truth[0] + truth[1])
              if want is not None}
    assert len(ratios) == (7 if lstm else 5), ratios
    assert not got[0][~valid].any() and not got[4][~valid].any(), "outputs and dx past a length must be zeros"
    worst = max(ratios, key=ratios.get)
    assert ratios[worst] <= REALISTIC_FACTOR, (
        f"{mode}: {worst} at {ratios[worst]:.2f}x the fp32 floor (bound {REALISTIC_FACTOR}x): "
        + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))
