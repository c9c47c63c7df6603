"""The bench scripts' verdicts, not their timings: a ratio past its target makes the script exit 1, so a drift fails
the run that shows it. Each script's own verdict function is fed results just inside and just outside every
bound it states."""
import importlib.util
import os
import sys
import types

import pytest

from conftest import ROOT


def bench_module(name, monkeypatch):
    """bench/<name>.py loaded as a module, leaving the environment variables it defaults and sys.path as they
    were."""
    for var in ("TF_CPP_MIN_LOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS"):
        monkeypatch.setenv(var, os.environ.get(var, ""))  # restored (or removed again) after the test
    monkeypatch.setattr(sys, "path", [os.path.join(ROOT, "bench")] + sys.path)
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "bench", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_exports_exits_1_on_any_missed_target(monkeypatch, capsys):
    bench = bench_module("bench_exports", monkeypatch)
    args = types.SimpleNamespace(json=True)
    inside = {}
    for key, (_, sense, bound) in bench.TARGETS.items():
        inside[key] = bound * (0.99 if sense != ">=" else 1.01)
    assert bench.missed_targets(inside) == [] and bench.report(dict(inside), args) == 0
    for key, (label, sense, bound) in bench.TARGETS.items():
        outside = dict(inside, **{key: bound * (1.01 if sense != ">=" else 0.99)})
        assert [m.split(" ")[0] for m in bench.missed_targets(outside)] == [label.split(" ")[0]], key
        assert bench.report(outside, args) == 1, key
    assert bench.TARGETS["saved_model_b1_over_onnx"][2] == bench.TARGETS["gru_saved_model_b1_over_onnx"][2] == 1.4
    assert bench.missed_targets({"ragged_speedup_over_tf2onnx": None}) == []  # not measured: no verdict
    assert bench.missed_targets({"char_lm_loss_change": -0.011}) != []  # the loss bound holds both ways
    capsys.readouterr()


@pytest.mark.parametrize("device,lstm,gru,missed", [("CPU", 1.21, 1.01, 0), ("CPU", 1.19, 1.01, 1),
                                                     ("CPU", 1.21, 0.99, 1), ("GPU", 1.31, 1.29, 1)])
def test_bench_training_fails_a_speedup_under_its_devices_target(monkeypatch, device, lstm, gru, missed):
    bench = bench_module("bench_training", monkeypatch)
    results = {"device": device, "modes": {mode: {"speedup": {"keras stacked": value, "keras non-cuDNN": 6.0}}
                                          for mode, value in (("lstm", lstm), ("gru", gru))}}
    assert len(bench.missed_targets(results)) == missed, bench.missed_targets(results)
