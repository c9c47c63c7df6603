"""A library call leaves the caller's process as it found it: ``cudnn_port.convert()`` (each road) and ``verify()``
run in a fresh Python process change neither ``os.environ``, nor what fd 2 is, nor ``warnings.filters``, nor the
levels of the libraries' loggers. The third-party libraries are imported before the snapshot: what TensorFlow or
h5py set at their own import is theirs, not ours (the CLI's quiet, which does change all of these on purpose, is
tested in test_quiet.py)."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

pytest.importorskip("tensorflow")
pytest.importorskip("onnxruntime")

PROBE = r"""
import json, logging, os, sys, warnings
import h5py, keras, onnx, onnxruntime, tensorflow  # their own import-time settings are not ours
import tf2onnx.convert  # sets TF_CPP_MIN_LOG_LEVEL=3 when imported (tf2onnx 1.17)
# not "absl": tf.saved_model.save itself sets absl's verbosity (autotrackable._trackable_children, TF 2.21)
LOGGERS = ("tensorflow", "tf2onnx", "keras", "onnx", "onnxruntime", "h5py", "")

def snapshot():
    st = os.fstat(2)
    return {"environ": dict(os.environ), "fd2": [st.st_dev, st.st_ino],
            "filters": [repr(f) for f in warnings.filters],
            "levels": {n: logging.getLogger(n).level for n in LOGGERS}}

import cudnn_port
before = snapshot()
cudnn_port.convert(sys.argv[1], sys.argv[2])
after_convert = snapshot()
cudnn_port.verify(sys.argv[2])
print(json.dumps({"before": before, "convert": after_convert, "verify": snapshot()}))
"""


def _run(source, out):
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS")}
    proc = subprocess.run([sys.executable, "-c", PROBE, str(source), str(out)], capture_output=True, text=True,
                          env=dict(env, PYTHONPATH=ROOT), cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("source", [os.path.join("models", "tf1_bilstm", "model.ckpt"),
                                    os.path.join("models", "char_lm", "model.keras")], ids=["checkpoint", "keras"])
@pytest.mark.slow
def test_convert_and_verify_leave_the_process_unchanged(tmp_path, source):
    seen = _run(os.path.join(ROOT, source), tmp_path / "out")
    before = seen["before"]
    assert "TF_ENABLE_ONEDNN_OPTS" not in before["environ"]
    for call in ("convert", "verify"):
        after = seen[call]
        changed = {k for k in set(before["environ"]) | set(after["environ"])
                   if before["environ"].get(k) != after["environ"].get(k)}
        assert not changed, f"{call} changed os.environ: {sorted(changed)}"
        assert after["fd2"] == before["fd2"], f"{call} left fd 2 redirected"
        assert after["filters"] == before["filters"], f"{call} changed warnings.filters"
        assert after["levels"] == before["levels"], f"{call} changed logger levels"
