"""``tf_graph.stack_forward``'s loop forms against the NumPy reference (float64, shares no code with it): four steps
per iteration plus a remainder for small batches, one step per iteration from ``tf_loop.UNROLL_BELOW`` rows on,
both compiled by XLA as well (``jit_compile=True`` on a stack without ``until``, as on the fused layers), and an
LSTM with a projection (h narrower than c). Which form a batch gets is a speed choice, not checked here: every form
must give the reference's numbers.

Tolerance: the suite's fp32 bound (``ATOL_FP32``, 1e-5); these sizes differ from the reference by ~1e-7. One case
runs the loops with TensorFlow's oneDNN rewrite on."""
import dataclasses

import numpy as np
import pytest

from helpers import ATOL_FP32, assert_close, make_spec, random_blob
from cudnn_port import reference
from cudnn_port.layout import unpack

tf = pytest.importorskip("tensorflow")

from cudnn_port import tf_loop  # noqa: E402
from cudnn_port.tf_graph import stack_forward  # noqa: E402

# (batch, steps): T a multiple of UNROLL (no remainder), T with a remainder, T below UNROLL, a batch that runs
# the one-step loop alone
SHAPES = [(3, 2 * tf_loop.UNROLL), (3, 2 * tf_loop.UNROLL + 1), (2, tf_loop.UNROLL - 1),
          (tf_loop.UNROLL_BELOW + 1, tf_loop.UNROLL + 2)]


def batch_of(spec, batch, steps, seed):
    """Ragged lengths (full, 1 and in between, cycled), random x past them too, non-zero states."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, steps, spec.input_size)).astype("float32")
    lengths = np.resize(np.array([steps, 1, max(1, steps // 2), max(1, steps - 1)], np.int32), batch)
    h_0 = (rng.normal(size=(spec.num_pseudo_layers, batch, spec.state_size)) * 0.5).astype("float32")
    c_0 = (rng.normal(size=(spec.num_pseudo_layers, batch, spec.num_units)) * 0.5).astype("float32")
    return x, lengths, h_0, c_0


def loop_case(mode, batch, steps, jit=False):
    """[(output name, stack_forward's value, the reference's)] for a random case of ``mode`` ("lstm", "gru" or
    "lstm-proj": h 2 narrower than c) with :func:`batch_of`'s data; GRU has no final_c."""
    spec = make_spec(mode.split("-")[0], 2, True)
    if mode == "lstm-proj":
        spec = dataclasses.replace(spec, num_proj=spec.num_units - 2)
    canon = unpack(spec, random_blob(spec, seed=steps))
    x, lengths, h_0, c_0 = batch_of(spec, batch, steps, seed=batch)
    run = tf.function(lambda *a: stack_forward(canon, *a), jit_compile=jit, autograph=False)
    got = run(x, lengths, h_0, c_0 if spec.mode == "lstm" else None)
    want = reference.forward(canon, x, lengths, h_0, c_0)
    return [(what, g.numpy(), w) for what, g, w in zip(("outputs", "final_h", "final_c"), got, want) if w is not None]


@pytest.mark.parametrize("jit", [False, True], ids=["graph", "xla"])
@pytest.mark.parametrize("batch,steps", SHAPES)
@pytest.mark.parametrize("mode", ["lstm", "gru", "lstm-proj"])
def test_loop_forms_match_reference(mode, batch, steps, jit):
    for what, got, want in loop_case(mode, batch, steps, jit):
        assert_close(got, want, f"{mode} batch {batch} T={steps} {'xla' if jit else 'graph'} {what}")


ONEDNN_SCRIPT = r"""
import json, os, sys
tests = sys.argv[1]
sys.path[:0] = [tests, os.path.dirname(tests)]
import numpy as np
import tensorflow as tf
try:
    from tensorflow.python.util._pywrap_util_port import IsMklEnabled
except ImportError:  # a TensorFlow without the switch: the caller skips
    print(json.dumps({"onednn": False}))
    sys.exit(0)
from test_tf_loop import loop_case

errors = {"onednn": bool(IsMklEnabled())}
for mode in ("lstm", "gru", "lstm-proj"):
    for batch, steps in ((3, 9), (9, 6)):  # four steps per iteration and a remainder; one step per iteration
        errors[f"{mode} batch {batch} T={steps}"] = max(
            float(np.abs(got - want).max()) for _, got, want in loop_case(mode, batch, steps))
print(json.dumps(errors))
"""


@pytest.mark.slow
def test_loop_forms_match_reference_under_onednn():
    """The same check with TensorFlow's oneDNN rewrite on (``TF_ENABLE_ONEDNN_OPTS=1``, its default on x86 CPUs
    with AVX512_VNNI, AVX512_BF16 or AMX; the rest of the suite runs with it off), in a subprocess since TensorFlow
    reads the variable once: the loop's products (``SparseMatMul`` for small batches, ``MatMul``, which the rewrite
    replaces, from ``UNROLL_BELOW`` rows on) and the input products give the reference's numbers there too."""
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="1", TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-c", ONEDNN_SCRIPT, os.path.dirname(__file__)], capture_output=True,
                          text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    errors = json.loads(proc.stdout.strip().splitlines()[-1])
    if not errors.pop("onednn"):
        pytest.skip("this TensorFlow build has no oneDNN rewrite (not an x86 build with oneDNN)")
    for what, err in errors.items():
        assert err <= ATOL_FP32, f"oneDNN on, {what}: max abs error {err:.3g} > {ATOL_FP32}"


@pytest.mark.parametrize("mode", ["lstm", "gru", "lstm-proj"])
@pytest.mark.parametrize("batch,steps", [(1, 2 * tf_loop.UNROLL + 1), (tf_loop.UNROLL_BELOW, 3), (2, 0)])
def test_full_length_forms_match_reference(mode, batch, steps):
    """No lengths (every sequence full, as a layer without a mask runs in an export): the loops' last states are the
    final ones, and an LSTM of Keras' functions runs as BlockLSTMV2 below UNROLL_BELOW (``block_lstm``; the others,
    a projection's among them, keep the loops), both directions, non-zero states; no steps at all keeps h0 / c0."""
    spec = make_spec(mode.split("-")[0], 2, True)
    if mode == "lstm-proj":
        spec = dataclasses.replace(spec, num_proj=spec.num_units - 2)
    canon = unpack(spec, random_blob(spec, seed=steps + 7))
    x, _, h_0, c_0 = batch_of(spec, batch, steps, seed=batch + 3)
    c_in = c_0 if spec.mode == "lstm" else None
    run = tf.function(lambda x, h, c: stack_forward(canon, x, None, h, c, block_lstm=True), autograph=False)
    got = run(x, h_0, c_in)
    want = reference.forward(canon, x, np.full(batch, steps, np.int32), h_0, c_0)
    for what, g, w in zip(("outputs", "final_h", "final_c"), got, want):
        if w is not None:
            assert_close(g.numpy(), w, f"{mode} batch {batch} T={steps} full length {what}")
