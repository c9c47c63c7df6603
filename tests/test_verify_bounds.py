"""The GPU row's bound is the case's own (4x its fp32 floor), never taken from the artifacts' errors.

No GPU runs here: ``gpu_row`` is replaced by a recorder of what verify asks of it, and the bound is checked against
the reference's math run in fp32 on the batch it was given.
"""
import importlib
import os

import numpy as np
import pytest

from helpers import ROOT
from cudnn_port import reference
from cudnn_port.judging.parity import ATOL, RTOL, skipped_row

pytest.importorskip("tensorflow")
verify_module = importlib.import_module("cudnn_port.verify")  # the module; cudnn_port.verify is its function
stack_case = importlib.import_module("cudnn_port.judging.stack_case")  # where verify judges each stack


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    from cudnn_port import convert

    out = tmp_path_factory.mktemp("bounds") / "out"
    convert(os.path.join(ROOT, "models", "tf1_bilstm", "model.ckpt"), out, formats=["checkpoint"])
    return out


def gpu_bounds(out, monkeypatch, artifact_error=None):
    """{stack: (the GPU row's atol, canon, batch, want)} of ``verify(out)``; with ``artifact_error``, every
    per-stack artifact row passes with that error (a loose but passing artifact)."""
    asked = {}

    def recorded(spec, canon, batch, want, atol, rtol):
        asked[len(asked)] = (atol, canon, batch, want)
        return skipped_row("cudnn (GPU, TF32 off)", "recorded by the test")

    with monkeypatch.context() as patch:
        patch.setattr(stack_case, "gpu_row", recorded)
        if artifact_error is not None:
            real = stack_case.checkpoint_judge
            patch.setattr(stack_case, "checkpoint_judge", lambda *a: dict(
                real(*a), max_abs=artifact_error, passed=True))
        report = verify_module.verify(out)
    assert report["passed"], [r for r in report["rows"] if r["passed"] is False]
    return asked


def test_the_gpu_bound_is_four_times_the_cases_fp32_floor(converted, monkeypatch):
    asked = gpu_bounds(converted, monkeypatch)
    assert asked
    for atol, canon, (x, lengths, h, c), want in asked.values():
        single = reference.forward(canon, x, lengths, h, c, dtype=np.float32)  # fp32 NumPy, against float64
        excess = max(float(np.max(np.abs(np.asarray(s, np.float64) - w) - RTOL * np.abs(w)))
                     for s, w in zip(single, want) if w is not None)
        assert atol >= max(ATOL, 4 * excess)  # a right cuDNN, as far from float64 as fp32 math goes, passes
        assert atol <= 1e-4  # and it stays a small stack's fp32 bound (measured: 1e-5 here)


def test_a_loose_passing_artifact_does_not_loosen_the_gpu_bound(converted, monkeypatch):
    """Before, the bound was 4x the worst passing CPU artifact's error: one artifact off by 3e-3 within its own
    tolerance gave the GPU 1.2e-2."""
    right = {k: v[0] for k, v in gpu_bounds(converted, monkeypatch).items()}
    loose = {k: v[0] for k, v in gpu_bounds(converted, monkeypatch, artifact_error=3e-3).items()}
    assert loose == right
