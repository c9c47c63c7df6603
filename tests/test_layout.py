"""The buffer layout: sizes, offsets against an independent packer, bit-exact round trips."""
import numpy as np
import pytest

from helpers import CONFIG_IDS, CONFIGS, make_spec, random_blob
from cudnn_port.errors import CudnnPortError, UnsupportedError
from cudnn_port.gates import reorder
from cudnn_port.infer import Clues, candidates, choose
from cudnn_port.layout import RNNSpec, pack, unpack


def independent_pack(spec, rng):
    """A buffer from per-gate arrays following docs/conventions.md, section 1, literally: (buffer, arrays)."""
    G, H, D = spec.num_gates, spec.num_units, spec.num_dirs
    arrays, weights, biases = [], [], []
    for p in range(spec.num_layers * D):
        width = spec.input_size if p < D else D * H
        W = [rng.normal(size=(H, width)) for _ in range(G)]
        R = [rng.normal(size=(H, H)) for _ in range(G)]
        bW = [rng.normal(size=H) for _ in range(G)]
        bR = [rng.normal(size=H) for _ in range(G)]
        arrays.append((W, R, bW, bR))
        weights += [w.ravel() for w in W + R]  # row-major [H, in]
        biases += bW + bR
    return np.concatenate(weights + biases).astype(spec.dtype), arrays


@pytest.mark.parametrize("mode,layers,bi", CONFIGS, ids=CONFIG_IDS)
def test_unpack_matches_documented_layout(mode, layers, bi):
    spec = make_spec(mode, layers, bi)
    blob, arrays = independent_pack(spec, np.random.default_rng(7))
    canon = unpack(spec, blob)
    for p, (W, R, bW, bR) in enumerate(arrays):
        for g in range(spec.num_gates):
            for name, want, got in (("W", W[g], canon.layers[p].W[g]), ("R", R[g], canon.layers[p].R[g]),
                                    ("b_W", bW[g], canon.layers[p].b_W[g]), ("b_R", bR[g], canon.layers[p].b_R[g])):
                np.testing.assert_array_equal(got, want.astype(spec.dtype), err_msg=f"pseudo-layer {p} {name} gate {g}")


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("mode,layers,bi", CONFIGS, ids=CONFIG_IDS)
def test_round_trip_is_bit_exact(mode, layers, bi, dtype):
    spec = make_spec(mode, layers, bi, dtype)
    blob = random_blob(spec, seed=layers)
    again = pack(unpack(spec, blob))
    assert again.dtype == np.dtype(dtype)
    assert again.tobytes() == blob.tobytes()


def test_param_count_matches_known_checkpoint_and_formula():
    # R-Net's cudnn_gru/opaque_kernel: 86184 = 3*76*(300+76) + 6*76 (docs/conventions.md, section 1).
    assert RNNSpec("gru", 1, 76, 300).param_count == 86184
    # 2-layer BiLSTM, I=256, H=512, written out by hand: layer 0 and layer 1 (input 2H), both directions.
    G, H, In = 4, 512, 256
    by_hand = 2 * (G * H * In + G * H * H + 2 * G * H) + 2 * (G * H * 2 * H + G * H * H + 2 * G * H)
    assert RNNSpec("lstm", 2, H, In, True).param_count == by_hand


def test_wrong_size_buffer_is_rejected_with_expected_count():
    spec = make_spec("lstm", 2, True)
    with pytest.raises(CudnnPortError, match=f"expected {spec.param_count}"):
        unpack(spec, np.zeros(spec.param_count + 1, "float32"))


def test_skip_input_is_rejected_clearly():
    with pytest.raises(UnsupportedError, match="skip_input"):
        RNNSpec("lstm", 1, 8, 8, input_mode="skip_input")


@pytest.mark.parametrize("mode,units,proj,needle", [("gru", 8, 3, "only LSTM"), ("lstm", 8, 8, "num_proj < num_units"),
                                                    ("lstm", 8, -1, "expected 0")])
def test_projection_sizes_cudnn_cannot_have_are_refused(mode, units, proj, needle):
    with pytest.raises(CudnnPortError, match=needle):
        RNNSpec(mode, 1, units, 5, num_proj=proj)


def test_reorder_moves_whole_gate_blocks():
    blocks = np.repeat(np.arange(4), 3)  # gate k's block is all k
    assert reorder(blocks, "ifco", "iofc").tolist() == [0] * 3 + [3] * 3 + [1] * 3 + [2] * 3
    with pytest.raises(ValueError):
        reorder(blocks, "ifco", "iffo")


@pytest.mark.parametrize("mode,layers,bi", CONFIGS, ids=CONFIG_IDS)
def test_candidates_contain_the_true_spec(mode, layers, bi):
    spec = make_spec(mode, layers, bi)
    found = candidates(spec.param_count)
    assert spec in found
    for other in found:
        assert other.param_count == spec.param_count
    fixed, _ = choose("x", spec.param_count, "float32", Clues(), mode=mode, num_layers=layers, num_units=spec.num_units,
                      bidirectional=bi)
    assert fixed == spec


def test_choose_explains_ambiguity_and_mismatch():
    spec = make_spec("lstm", 2, True)
    with pytest.raises(CudnnPortError, match="pass .*--mode.*to choose"):
        choose("v", spec.param_count, "float32", Clues())
    with pytest.raises(CudnnPortError, match=r"expect \d+ elements.*specs that fit"):
        choose("v", spec.param_count, "float32", Clues(), mode="gru", num_layers=1, num_units=7, input_size=3,
               bidirectional=False)


@pytest.mark.parametrize("shape", [(1, 1), (3, 700), (513, 257), (256, 512)])
def test_blocked_transpose_copy_equals_numpy(shape):
    from cudnn_port.checkpoint import contiguous

    a = np.random.default_rng(0).normal(size=shape).astype("float32")
    got = contiguous(a.T)
    assert got.flags.c_contiguous and got.shape == shape[::-1]
    np.testing.assert_array_equal(got, a.T)
