"""Fixtures, and the process settings every test module runs under. Plain helpers live in helpers.py."""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import pytest

from helpers import CHAR_LM, ROOT, tagger

sys.path.insert(0, os.path.join(ROOT, "examples"))

pytest_plugins = ["pytester"]
collect_ignore = ["fixtures/gpu_keras/train_on_gpu.py"]  # a GPU script kept with the fixtures it made (needs a GPU)


# Test files by their time (seconds summed over their tests' setups, calls and teardowns at both version sets, as
# CI's `--durations` summary prints them, 2026-12-07), heaviest first: xdist's --dist loadfile hands files to workers
# in collection order, and a heavy file started last is the run's tail (alphabetical order left test_sources.py and
# test_verify_tamper.py, about 200 s each, to the end).
HEAVY_FIRST = ("test_stock_cells.py", "test_keras_user_models.py", "test_sources.py", "test_verify_tamper.py",
               "test_tf_keras_saved_models.py", "test_saved_model_text_and_tf20.py", "test_untrusted_graphs.py",
               "test_layers.py", "test_tf_keras_build_saved_models.py", "test_torch_programs.py",
               "test_stock_keras.py", "test_exports.py", "test_gpu_trained.py", "test_torch_published_programs.py",
               "test_hardening.py", "test_tf_loop.py", "test_keras3_rocm_exports.py", "test_quiet.py",
               "test_stock_masks.py", "test_parity_failures.py", "test_signals.py", "test_simple_rnn.py",
               "test_whole_model_openvino.py", "test_cudnn_fixtures.py", "test_tf_keras_mixed_precision.py",
               "test_keras2_files.py", "test_examples.py", "test_torchscript_programs.py", "test_registry.py",
               "test_readme.py", "test_verify_masks.py", "test_tf1_canonical.py")


def pytest_configure(config):
    """pytest-xdist 3.6 and later sort --dist loadfile's files by their number of tests unless told not to
    (``--no-loadscope-reorder``; 3.0.2, the lowest version, has no such option): the order is HEAVY_FIRST's."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


FILE_TIMES = {}  # test file -> seconds of its tests' setups, calls and teardowns, summed (the xdist controller's)


def pytest_runtest_logreport(report):
    name = report.nodeid.split("::")[0]
    FILE_TIMES[name] = FILE_TIMES.get(name, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    """With ``--durations``: the 25 test files that took longest, their tests' times summed, so that HEAVY_FIRST
    can follow them (a heavy file started last is the run's tail)."""
    if not terminalreporter.config.getoption("durations", None) or not FILE_TIMES:
        return
    terminalreporter.write_sep("=", "heaviest test files (seconds, setups + calls + teardowns)")
    for name, seconds in sorted(FILE_TIMES.items(), key=lambda item: -item[1])[:25]:
        terminalreporter.write_line(f"{seconds:8.1f}  {name}")


def pytest_collection_modifyitems(items):
    """Heavy files first (:data:`HEAVY_FIRST`), the rest in their order; a file's tests stay together."""
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(os.path.basename(str(item.fspath)), len(rank)))


@pytest.fixture
def tf1_ckpt(tmp_path):
    """A TF1 Saver checkpoint holding the sample model; yields its prefix."""
    from make_tf1_checkpoint import sample_variables, save_tf1

    return save_tf1(str(tmp_path / "src" / "model.ckpt"), sample_variables(seed=3))


# Conversions made once per session and only read by the tests that take them (a test that changes or verifies
# one works on a copy: verify writes parity.json into the folder it checks).
@pytest.fixture(scope="session")
def char_lm_out(tmp_path_factory):
    """The bundled char LM (models/char_lm/model.keras) exported whole: (out folder, manifest)."""
    from cudnn_port import convert

    out = tmp_path_factory.mktemp("char_lm") / "out"
    return out, convert(CHAR_LM, out)


@pytest.fixture(scope="session")
def tagger_out(tmp_path_factory):
    """helpers.tagger() (rebuilt alike by each call) exported whole: (out folder, manifest)."""
    import cudnn_port

    out = tmp_path_factory.mktemp("tagger") / "out"
    return out, cudnn_port.export(tagger(), out)
