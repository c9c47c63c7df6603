"""A held-out set of planted errors: each is planted in the conversion's own path (the writers, the rewrite, the
adapters), on the per-stack, whole-model and graph roads, none of them used by verify's other tests; each must make
``verify`` fail exactly the rows of the artifacts it made wrong, exit 1, while the same conversion made right passes.
"""
import json
import os

import numpy as np
import pytest

from helpers import ROOT
from cudnn_port import cli

tf = pytest.importorskip("tensorflow")
pytest.importorskip("onnxruntime")
keras = pytest.importorskip("keras")
pytestmark = pytest.mark.slow  # one conversion per plant


def failed_rows(out, capsys):
    """(exit code, the artifacts of the failed rows, all rows' artifacts) of ``verify OUT``."""
    code = cli.main(["verify", str(out), "--json", "--quiet"])
    report = json.loads(capsys.readouterr().out)
    rows = [r["artifact"] for r in report["rows"]]
    return code, {r["artifact"] for r in report["rows"] if r["passed"] is False}, rows


# --------------------------------------------------------------------------------------------- per stack (TF1)
def _b_r_dropped(real):
    def planted(canon, layer, *args, **kwargs):
        W, R, B = real(canon, layer, *args, **kwargs)
        B = B.copy()
        B[:, B.shape[1] // 2:] = 0  # the recurrent bias b_R left out
        return [W, R, B]
    return planted


def _backward_reads_forward(real):
    def planted(canon, layer, *args, **kwargs):
        W, R, B = real(canon, layer, *args, **kwargs)
        if len(W) == 2:
            W = np.stack([W[0], W[0]])  # the backward direction given the forward input weights
        return [W, R, B]
    return planted


@pytest.mark.parametrize("plant", [_b_r_dropped, _backward_reads_forward],
                         ids=["b_R dropped", "backward reads forward"])
def test_an_onnx_writer_error_on_the_stack_road(tmp_path, capsys, monkeypatch, plant):
    from cudnn_port import convert
    from cudnn_port.exports import onnx as onnx_export, onnx_portable

    with monkeypatch.context() as patch:
        patch.setattr(onnx_export, "layer_weights", plant(onnx_portable.layer_weights))
        patch.setattr(onnx_portable, "layer_weights", plant(onnx_portable.layer_weights))
        convert(os.path.join(ROOT, "models", "tf1_bilstm", "model.ckpt"), tmp_path / "out",
                formats=["checkpoint", "onnx"])
    code, failed, rows = failed_rows(tmp_path / "out", capsys)
    onnx_rows = {r for r in rows if r.startswith("onnx")}
    assert onnx_rows and code == 1 and failed == onnx_rows, (sorted(failed), sorted(onnx_rows))


# --------------------------------------------------------------------------------------------- whole model
def _seeded(model, seed=7):
    rng = np.random.default_rng(seed)
    model.set_weights([(rng.normal(size=w.shape) * 0.4).astype("float32") if w.dtype.kind == "f" else w
                       for w in model.get_weights()])
    return model


def bidirectional_concat():
    L = keras.layers
    x = keras.Input((None, 5), name="features")
    return _seeded(keras.Model(x, L.Dense(2)(L.Bidirectional(L.LSTM(4, return_sequences=True))(L.Masking()(x)))))


def tagger():
    L = keras.layers
    ids = keras.Input((None,), dtype="int32", name="tokens")
    seq = L.Bidirectional(L.GRU(4, return_sequences=True))(L.Embedding(11, 6, mask_zero=True)(ids))
    return _seeded(keras.Model(ids, L.Dense(3)(seq)))


def stacked_gru():
    L = keras.layers
    x = keras.Input((None, 5), name="features")
    seq = L.GRU(3)(L.LSTM(4, return_sequences=True)(L.Masking(mask_value=-2.0)(x)))
    return _seeded(keras.Model(x, L.Dense(2)(seq)))


def _concat_swapped(module):
    real = module._merged
    return "_merged", lambda pair, merge_mode: real(pair[::-1], merge_mode) if merge_mode == "concat" else \
        real(pair, merge_mode)


def _masked_steps_repeat(module):
    real = module.expand
    return "expand", lambda y, mask, counts, zero_output: real(y, mask, counts, False)


def _last_valid_step_dropped(module):
    real = module._plan

    def planted(mask):
        order, lengths, counts, _ = real(mask)
        lengths = tf.maximum(lengths - 1, 0)
        return order, lengths, counts, tf.sequence_mask(lengths, tf.shape(mask)[1])
    return "_plan", planted


@pytest.mark.parametrize("build,plant", [(bidirectional_concat, _concat_swapped), (tagger, _masked_steps_repeat),
                                         (stacked_gru, _last_valid_step_dropped)],
                         ids=["concat halves swapped", "masked steps repeat the last output", "last step dropped"])
def test_a_rewrite_error_on_the_whole_model_road(tmp_path, capsys, monkeypatch, build, plant):
    import cudnn_port
    from cudnn_port import deps
    from cudnn_port.keras_models import stock_adapter
    from cudnn_port.errors import ParityError

    name, planted = plant(stock_adapter)
    with monkeypatch.context() as patch, pytest.raises(ParityError):  # export's own parity sees it too
        patch.setattr(stock_adapter, name, planted)
        cudnn_port.export(build(), tmp_path / "out", formats=["saved_model", "onnx"], keep_failed=True)
    code, failed, _ = failed_rows(tmp_path / "out", capsys)
    onnx = {"onnx (onnxruntime)"} | ({"onnx (openvino f32)"} if deps.available("openvino") else set())
    assert code == 1 and failed == {"saved_model"} | onnx, failed


# --------------------------------------------------------------------------------------------- graph road
def test_a_rewrite_whose_cpu_function_reads_params_off_by_a_little_on_the_graph_road(tmp_path, capsys, monkeypatch):
    """The rewrite's CPU function of each cuDNN node (OUT/saved_model) reads the params tensor scaled by 1.001; the
    ONNX, written by its own handler, is right."""
    from test_sources import traced_as_on_a_gpu_host
    from cudnn_port import convert
    from cudnn_port.graphs import rewrite

    source = tmp_path / "source"
    with traced_as_on_a_gpu_host():
        stacked_gru().export(str(source), verbose=False)
    real = rewrite.cudnn_op_cpu
    with monkeypatch.context() as patch:
        patch.setattr(rewrite, "cudnn_op_cpu", lambda spec, time_major, count, x, h, c, params, *rest: real(
            spec, time_major, count, x, h, c, params * 1.001, *rest))
        convert(str(source), tmp_path / "out")
    code, failed, _ = failed_rows(tmp_path / "out", capsys)
    assert code == 1 and failed == {"saved_model [serve]", "saved_model [serving_default]"}, failed
