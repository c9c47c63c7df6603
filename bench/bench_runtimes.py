"""Runtime benchmark of the ONNX models on the reference config (2-layer LSTM, input 256, hidden 512, 100 steps, CPU).

Every number is measured in this one run, so the ratios compare like with like:

1. onnxruntime: the portable graph ``model.onnx`` holds (right in OpenVINO too: LSTM as forward nodes with the
   backward directions through ``ReverseSequence``; GRU as one node per layer with a padding channel; outputs
   masked) against the plain fused graph (one bidirectional node per layer, right only where ``sequence_lens`` is
   honoured), BiLSTM and BiGRU, at batch 1 (full length) and batch 32 (ragged), timed in alternating blocks.
   Target: portable / plain <= 1.05 (each mode and batch; the script exits 1 when one misses it).
2. OpenVINO (if installed): error against the float64 NumPy reference on a ragged batch of 32 with non-zero states,
   of the portable graph in f32 and in bf16 (the CPU plugin's default on CPUs with AVX512-BF16 or AMX), and of the
   plain graph in f32 (which OpenVINO computes wrong on ragged batches); latency at batch 1 and 32 of f32 and bf16
   against onnxruntime, in alternating blocks.
3. Streaming, batch 1, unidirectional 2-layer LSTM of the same sizes, ``model_stateful.onnx`` in onnxruntime:
   latency of one call on a chunk of 1 step and of 16 steps (states carried in and out) against one call on the
   whole 100 steps, and the time per step of each.

    python bench/bench_runtimes.py [--repeat 10] [--json]
"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_exports import time_blocks  # noqa: E402
from cudnn_port.layout import RNNSpec, unpack  # noqa: E402

LAYERS, INPUT, HIDDEN, STEPS = 2, 256, 512, 100
PORTABLE_TARGET = 1.05  # model.onnx (right in OpenVINO too) over the plain fused graph, in onnxruntime


def stack(mode, bidirectional, seed):
    """A CanonicalRNN of the reference sizes with random weights (scale 0.05, so the gates do not saturate)."""
    spec = RNNSpec(mode, LAYERS, HIDDEN, INPUT, bidirectional)
    return unpack(spec, (np.random.default_rng(seed).normal(size=spec.param_count) * 0.05).astype(np.float32))


def feeds(spec, batch, lengths, states, rng, steps=STEPS):
    out = {"inputs": rng.normal(size=(batch, steps, INPUT)).astype(np.float32),
           "sequence_lengths": np.asarray(lengths, np.int32)}
    if states:
        shape = (spec.num_pseudo_layers, batch, HIDDEN)
        out["initial_h"] = (rng.normal(size=shape) * 0.5).astype(np.float32)
        if spec.mode == "lstm":
            out["initial_c"] = (rng.normal(size=shape) * 0.5).astype(np.float32)
    return out


def ragged(batch, rng):
    return np.concatenate([[STEPS, 1], rng.integers(1, STEPS + 1, size=batch - 2)])


def session(model):
    from cudnn_port.exports.runners import onnx_session

    run = onnx_session(model.SerializeToString()).run
    return lambda f: run(None, f)


def onnxruntime_forms(repeat, rng):
    """1. portable vs plain graph in onnxruntime."""
    from cudnn_port.exports.onnx import build_model

    res = {}
    for mode in ("lstm", "gru"):
        canon = stack(mode, True, 0)
        portable, plain = (session(build_model(canon, portable=p)) for p in (True, False))
        for batch, lengths in ((1, [STEPS]), (32, ragged(32, rng))):
            f = feeds(canon.spec, batch, lengths, False, rng)
            a, b = time_blocks([(portable, f), (plain, f)], repeat)
            res[f"{mode}_b{batch}"] = {"portable_ms": a * 1e3, "plain_ms": b * 1e3, "portable_over_plain": a / b}
    return res


def openvino_rows(repeat, rng):
    """2. OpenVINO: error of each graph and precision, and speed against onnxruntime."""
    from cudnn_port import deps, reference

    if not deps.available("openvino"):
        return {"openvino": "not installed: pip install 'cudnn-port[openvino]'"}
    import openvino as ov

    from cudnn_port.exports.onnx import build_model
    from cudnn_port.exports.openvino import open_onnx

    res = {"openvino": ov.__version__}
    canon = stack("lstm", True, 0)
    spec = canon.spec
    f = feeds(spec, 32, ragged(32, rng), True, rng)
    want = reference.forward(canon, f["inputs"], f["sequence_lengths"], f["initial_h"], f["initial_c"])
    with tempfile.TemporaryDirectory() as tmp:
        for form, portable in (("portable", True), ("plain", False)):
            path = os.path.join(tmp, f"{form}.onnx")
            with open(path, "wb") as out:
                out.write(build_model(canon, states=True, portable=portable).SerializeToString())
            for precision in ("f32", "bf16") if portable else ("f32",):
                got = open_onnx(path, spec, precision)(f)
                res[f"error_{form}_{precision}"] = max(float(np.abs(g - w).max()) for g, w in zip(got, want))
        path = os.path.join(tmp, "model.onnx")
        with open(path, "wb") as out:
            out.write(build_model(canon).SerializeToString())
        runs = {"onnxruntime": session(build_model(canon))}
        for precision in ("f32", "bf16"):
            run = open_onnx(path, spec, precision)
            runs[f"openvino_{precision}"] = lambda x, run=run: run(x)
        for batch, lengths in ((1, [STEPS]), (32, [STEPS] * 32)):
            fb = feeds(spec, batch, lengths, False, rng)
            times = time_blocks([(fn, fb) for fn in runs.values()], repeat)
            res[f"b{batch}_ms"] = {name: t * 1e3 for name, t in zip(runs, times)}
    return res


def streaming(repeat, rng):
    """3. batch-1 latency per chunk of model_stateful.onnx against the whole-sequence call."""
    from cudnn_port.exports.onnx import build_model

    canon = stack("lstm", False, 1)
    run = session(build_model(canon, states=True))
    calls = [(run, feeds(canon.spec, 1, [steps], True, rng, steps)) for steps in (1, 16, STEPS)]
    one, sixteen, whole = time_blocks(calls, repeat * 5)
    return {"chunk1_ms": one * 1e3, "chunk16_ms": sixteen * 1e3, "whole_ms": whole * 1e3,
            "per_step_us": {"chunk1": one * 1e6, "chunk16": sixteen / 16 * 1e6, "whole": whole / STEPS * 1e6}}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    res = {"config": f"{LAYERS}-layer, input {INPUT}, hidden {HIDDEN}, {STEPS} steps", "cores": os.cpu_count(),
           "onnxruntime_forms": onnxruntime_forms(args.repeat, rng), "openvino": openvino_rows(args.repeat, rng),
           "streaming": streaming(args.repeat, rng)}
    res["targets_missed"] = [f"{key} portable / plain {r['portable_over_plain']:.3f} (target <= {PORTABLE_TARGET})"
                             for key, r in res["onnxruntime_forms"].items()
                             if r["portable_over_plain"] > PORTABLE_TARGET]
    code = 1 if res["targets_missed"] else 0
    if args.json:
        print(json.dumps(res, indent=2))
        return code
    print(res["config"], f"(median of {args.repeat}+ runs, {res['cores']} cores)")
    print(f"1. onnxruntime, portable graph (model.onnx) vs plain fused graph; target portable / plain <= "
          f"{PORTABLE_TARGET}")
    for key, r in res["onnxruntime_forms"].items():
        print(f"   {key:<9} portable {r['portable_ms']:8.2f} ms  plain {r['plain_ms']:8.2f} ms  "
              f"ratio {r['portable_over_plain']:.3f}")
    ov_res = res["openvino"]
    if "error_portable_f32" not in ov_res:
        print(f"2. OpenVINO: {ov_res['openvino']}")
    else:
        print(f"2. OpenVINO {ov_res['openvino']}, BiLSTM, ragged batch 32 with states, max error vs float64 reference: "
              f"portable f32 {ov_res['error_portable_f32']:.1e}, portable bf16 {ov_res['error_portable_bf16']:.1e}, "
              f"plain f32 {ov_res['error_plain_f32']:.1e}")
        for batch in (1, 32):
            print(f"   batch {batch:<3}" + "  ".join(f"{k} {v:8.2f} ms" for k, v in ov_res[f"b{batch}_ms"].items()))
    s = res["streaming"]
    print(f"3. streaming, batch 1, model_stateful.onnx: chunk of 1 step {s['chunk1_ms']:.3f} ms, of 16 steps "
          f"{s['chunk16_ms']:.2f} ms, whole {STEPS} steps {s['whole_ms']:.2f} ms; per step "
          + ", ".join(f"{k} {v:.0f} us" for k, v in s["per_step_us"].items()))
    print("every target met" if not code else "targets MISSED: " + "; ".join(res["targets_missed"]))
    return code


if __name__ == "__main__":
    raise SystemExit(main())
