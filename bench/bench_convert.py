"""Conversion benchmark: a ~100M-parameter cuDNN buffer, converted to tf1 cells.

Prints, from one run: parameters per second, peak RSS as a multiple of the buffer's bytes, and two baselines
measured in the same run on the same file: a plain NumPy copy of the buffer (memory speed) and a copy-through
of the checkpoint with TensorFlow's own reader and writer (I/O speed). Each conversion runs in a fresh child
process so its peak RSS is its own. Exit 1 when the peak RSS target (<= 3x the buffer's bytes) is missed.

    python bench/bench_convert.py [--params 100e6] [--json]
"""
import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

from fresh_process import parse_or_run_child, run_child, status_mib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RSS_TARGET = 3.0  # peak RSS of a conversion over the buffer's bytes
sys.path.insert(0, ROOT)


def spec_for(params):
    """A 4-layer bidirectional LSTM with H = 1024 and the input size that brings it nearest ``params``."""
    from cudnn_port.layout import RNNSpec

    base = RNNSpec("lstm", 4, 1024, 1, True)
    per_input = 2 * 4 * 1024
    return RNNSpec("lstm", 4, 1024, max(1, round((params - base.param_count) / per_input) + 1), True)


def child(mode, src, out):
    """Run one job in this (fresh) process; print JSON with seconds and RSS figures."""
    from cudnn_port import checkpoint, converter  # noqa: F401  (imports count in the baseline RSS)
    import tensorflow as tf  # noqa: F401

    base = status_mib("VmRSS")
    start = time.perf_counter()
    if mode == "convert":
        converter.convert(src, out, num_layers=4, num_units=1024, mode="lstm", bidirectional=True,
                          formats=["checkpoint"])  # the TF1 cells alone: what this bench measures
    else:  # copy-through: read every tensor and write it again, unchanged
        ckpt = checkpoint.Checkpoint(src)
        checkpoint.write_checkpoint(out, ((n, ckpt.get(n), ckpt.dtypes[n]) for n in ckpt.names))
    seconds = time.perf_counter() - start
    peak = status_mib("VmHWM")
    print(json.dumps({"seconds": seconds, "baseline_rss_mib": base, "peak_rss_mib": peak}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=float, default=100e6)
    parser.add_argument("--json", action="store_true")
    args = parse_or_run_child(parser, child)

    from cudnn_port.checkpoint import write_checkpoint

    spec = spec_for(args.params)
    blob = np.random.default_rng(0).standard_normal(spec.param_count, dtype=np.float32) * 0.1
    mib = blob.nbytes / 2**20
    with tempfile.TemporaryDirectory() as tmp:
        src = write_checkpoint(os.path.join(tmp, "src"), [("cudnn_lstm/opaque_kernel", blob, "float32")])
        start = time.perf_counter()
        for _ in range(3):
            np.copy(blob)
        copy_s = (time.perf_counter() - start) / 3
        del blob
        through = run_child(__file__, "copy", src, os.path.join(tmp, "through"))
        conv = run_child(__file__, "convert", src, os.path.join(tmp, "out"))
    result = {
        "spec": spec.describe(), "params": spec.param_count, "blob_mib": round(mib, 1),
        "convert_s": round(conv["seconds"], 3), "params_per_s": round(spec.param_count / conv["seconds"]),
        "numpy_copy_s": round(copy_s, 3), "copy_through_s": round(through["seconds"], 3),
        "convert_over_copy_through": round(conv["seconds"] / through["seconds"], 2),
        "convert_over_numpy_copy": round(conv["seconds"] / copy_s, 1),
        "peak_rss_mib": round(conv["peak_rss_mib"]), "baseline_rss_mib": round(conv["baseline_rss_mib"]),
        "peak_rss_over_blob": round(conv["peak_rss_mib"] / mib, 2),
        "peak_rss_above_baseline_over_blob": round((conv["peak_rss_mib"] - conv["baseline_rss_mib"]) / mib, 2),
        "copy_through_peak_rss_over_blob": round(through["peak_rss_mib"] / mib, 2),
        "target": f"peak RSS <= {RSS_TARGET:g}x blob bytes",
    }
    result["target_met"] = result["peak_rss_over_blob"] <= RSS_TARGET
    if args.json:
        print(json.dumps(result, indent=2))
        return 0 if result["target_met"] else 1
    print(f"{result['spec']}: {result['params']:,} params, blob {result['blob_mib']} MiB")
    print(f"convert          {result['convert_s']:8.3f} s   {result['params_per_s'] / 1e6:8.1f} M params/s")
    print(f"copy-through     {result['copy_through_s']:8.3f} s   (TF read + write, same file)   "
          f"convert / copy-through = {result['convert_over_copy_through']}x")
    print(f"numpy copy       {result['numpy_copy_s']:8.3f} s   (memory speed)                 "
          f"convert / numpy copy = {result['convert_over_numpy_copy']}x")
    print(f"peak RSS         {result['peak_rss_mib']} MiB = {result['peak_rss_over_blob']}x blob "
          f"({result['peak_rss_above_baseline_over_blob']}x above the {result['baseline_rss_mib']} MiB after imports; "
          f"copy-through {result['copy_through_peak_rss_over_blob']}x)   target <= {RSS_TARGET:g}x: "
          f"{'met' if result['target_met'] else 'MISSED'}")
    return 0 if result["target_met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
