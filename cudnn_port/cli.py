"""``cudnn-port``: the command line, a thin shell over :mod:`cudnn_port.converter`, ``verify`` and ``benchmark``.

Exit codes: 0 ok, 2 bad input or usage (one line saying what and how to fix it), 1 internal error.
"""
import argparse
import json
import os
import sys

from . import __version__
from .errors import CudnnPortError

EPILOG = """examples:
  cudnn-port inspect train/model.ckpt
  cudnn-port verify out/
  cudnn-port bench out/ --json
  cudnn-port convert train/model.ckpt out/ --mode lstm --num-layers 2 --num-units 512 --bidirectional
  cudnn-port convert train/model.ckpt out/ --style pytorch --json
  cudnn-port convert keras2_model.h5 out/            (Keras 2 CuDNNLSTM/CuDNNGRU -> Keras 3 and the rest)
  cudnn-port convert exported_on_gpu/ out/           (a SavedModel with CudnnRNNV3 nodes -> CPU SavedModel, ONNX)
  cudnn-port convert model.keras out/                (a model with cudnn_port.layers -> whole-model CPU export)
exit codes: 0 ok, 2 bad input or usage, 1 internal error"""


SOURCE_HELP = ("a TensorFlow checkpoint (prefix, its .index file, or its folder), a Keras 2 .h5 file with "
               "CuDNNLSTM/CuDNNGRU layers, a .keras file of a model built with cudnn_port.layers, or a SavedModel "
               "folder whose graph holds CudnnRNN/V2/V3 nodes")


def _spec_flags(parser):
    group = parser.add_argument_group("spec (only needed when the buffer's size fits several specs)")
    group.add_argument("--variable", metavar="NAME", help="the buffer to use (default: every *opaque_kernel)")
    group.add_argument("--mode", choices=("lstm", "gru"))
    group.add_argument("--num-layers", type=int, metavar="N")
    group.add_argument("--num-units", type=int, metavar="H")
    group.add_argument("--input-size", type=int, metavar="I")
    group.add_argument("--bidirectional", action="store_true", default=None,
                       help="two directions (give --unidirectional to rule them out)")
    group.add_argument("--unidirectional", dest="bidirectional", action="store_false")


def build_parser():
    parser = argparse.ArgumentParser(
        prog="cudnn-port", description="Convert cuDNN RNN weights (opaque buffers) into canonical per-cell "
        "weights that CPU TensorFlow, Keras and PyTorch load. Needs no GPU.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"cudnn-port {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("inspect", help="list variables, cuDNN buffers and the specs that fit them",
                       description="List a source's variables, each cuDNN stack, how it was found and how it will "
                       "convert; for a bare buffer, every spec that fits its size, ranked by clues from the rest of "
                       "the checkpoint.")
    p.add_argument("checkpoint", metavar="SOURCE", help=SOURCE_HELP)
    _spec_flags(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")

    p = sub.add_parser("convert", help="write canonical weights, artifacts and a manifest to OUT/",
                       description="Convert every cuDNN stack of SOURCE into canonical per-cell tensors. Writes "
                       "OUT/checkpoint/ (name-based, other variables copied unchanged), the chosen --formats and "
                       "OUT/manifest.json. A SavedModel with cuDNN nodes becomes OUT/saved_model/ and "
                       "OUT/model.onnx; a .keras model with cudnn_port layers is exported whole. OUT appears whole "
                       "or not at all; SOURCE is never modified.")
    p.add_argument("checkpoint", metavar="SOURCE", help=SOURCE_HELP)
    p.add_argument("out", metavar="OUT", help="output folder (must not exist or be empty, unless --force)")
    _spec_flags(p)
    out = p.add_argument_group("output")
    out.add_argument("--style", choices=("tf1", "keras", "pytorch"),
                     help="names and layout of the converted tensors in OUT/checkpoint (default for a checkpoint: "
                     "tf1, CudnnCompatibleLSTMCell/GRUCell names under the buffer's scope; for a Keras .h5 file: "
                     "keras, which also rebuilds a full model in Keras 3 as OUT/keras/model.keras; for a .keras "
                     "model: keras)")
    out.add_argument("--formats", metavar="LIST", help="comma-separated artifacts: checkpoint, keras "
                     "(OUT/keras/*.keras), pytorch (OUT/pytorch/*.safetensors), saved_model (OUT/saved_model/), "
                     "graphdef (OUT/frozen_graph.pb), onnx (OUT/model.onnx); default: checkpoint, the style's own "
                     "(keras or pytorch), saved_model, graphdef, onnx")
    out.add_argument("--no-xla", dest="xla", action="store_false",
                     help="write the SavedModel in plain TensorFlow ops instead of one XLA-compiled function: for "
                     "runtimes without XLA:CPU JIT, such as TensorFlow Serving unless started with "
                     "--xla_cpu_compilation_enabled (about 2.5x slower at batch 1; no compile on first use). A SavedModel "
                     "source's rewritten graph is always plain ops")
    out.add_argument("--force", action="store_true", help="replace OUT if it is an earlier cudnn-port output")
    out.add_argument("--drop-optimizer-slots", action="store_true",
                     help="leave out the buffer's optimizer slots (…/Adam, …/Adam_1) instead of converting them")
    out.add_argument("--allow-nonfinite", action="store_true", help="convert buffers holding NaN/Inf as they are")
    out.add_argument("--json", action="store_true", help="print the manifest as JSON on stdout")
    out.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p = sub.add_parser("verify", help="check every artifact of OUT against the NumPy reference",
                       description="Run the NumPy reference of cuDNN's math and every artifact of a convert output "
                       "(checkpoint in a CPU graph, SavedModel, GraphDef, ONNX in onnxruntime) on seeded ragged "
                       "batches with non-zero initial states. Prints a table, writes OUT/parity.json, exits 1 on "
                       "any failure.")
    p.add_argument("out", metavar="OUT", help="a cudnn-port convert output folder")
    p.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance (default 1e-5)")
    p.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance (default 1e-4)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")

    p = sub.add_parser("bench", help="CPU latency and throughput of each artifact of OUT",
                       description="Time each artifact of a convert output on CPU at batch 1 and 32.")
    p.add_argument("out", metavar="OUT", help="a cudnn-port convert output folder")
    p.add_argument("--steps", type=int, default=100, help="sequence length (default 100)")
    p.add_argument("--repeat", type=int, default=5, help="timed runs per case; the median is shown (default 5)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return parser


def _flags(args):
    return dict(mode=args.mode, num_layers=args.num_layers, num_units=args.num_units, input_size=args.input_size,
                bidirectional=args.bidirectional)


def _print_inspect(report):
    print(f"{report['checkpoint']}  [{report['format']}]")
    if "nodes" in report:
        print(f"signatures: {', '.join(report['signatures'])}")
        for n in report["nodes"]:
            print(f"  {n['node']} ({n['op']}) in {n['function'] or 'the main graph'}")
            print(f"    converts as: {n['converts_as']}")
        print(f"writes: {', '.join(report['plan']['artifacts'])}")
        return
    print(f"{len(report['variables'])} variables:")
    for v in report["variables"]:
        print(f"  {v['name']:<60} {str(v['shape']):<16} {v['dtype']}")
    for s in report["stacks"]:
        print(f"\ncuDNN stack {s['variable']}: {s['size']} elements, {s['dtype']}\n  found: {s['found']}")
        if s["spec"]:
            plan = s["plan"]
            print(f"  converts as: {_describe(s['spec'])}  ({s['how']})\n  flags: {s['flags']}")
            print(f"  writes (style {plan['style']}{', ' + plan['scheme'] + ' names' if plan['scheme'] else ''}): "
                  f"{plan['layer_0_names'][0]}, ...\n  artifacts: {', '.join(plan['artifacts'])}")
        else:
            print(f"  {s['candidate_count']} specs fit; best first:")
            for c in s["candidates"][:8]:
                why = f"  <- {', '.join(c['reasons'])}" if c["reasons"] else ""
                print(f"    {_describe(c)}{why}")
            print(f"  to choose, pass {', '.join(s['settle_with']) or 'the spec flags'}")


def _describe(spec):
    """RNNSpec.describe() of a spec dict from a report (candidates carry extra keys: score, reasons)."""
    from .layout import RNNSpec

    fields = ("mode", "num_layers", "num_units", "input_size", "bidirectional", "dtype")
    return RNNSpec(**{k: spec[k] for k in fields}).describe()


def _print_convert(manifest, out):
    stacks = manifest["stacks"]
    if manifest.get("kind") == "saved_model":
        print(f"replaced {len(manifest['nodes'])} cuDNN nodes of {manifest['source']['checkpoint']}")
        for n in manifest["nodes"]:
            print(f"  {n['node']} ({n['op']}): {_describe(n['spec'])}")
        for kind, rel in manifest["model_artifacts"].items():
            print(f"  {kind}: {os.path.join(out, rel)}")
        print(f"  manifest: {os.path.join(out, 'manifest.json')}")
        return
    print(f"converted {len(stacks)} cuDNN stack{'s' if len(stacks) != 1 else ''} from {manifest['source']['checkpoint']}")
    for s in stacks:
        print(f"  {s['variable']}: {_describe(s['spec'])} ({s['spec_source']})")
        print(f"    -> {len(s['targets'])} tensors, e.g. {s['targets'][0]}")
        if s["slots"]:
            print(f"    optimizer slots converted: {', '.join(x[len(s['variable']) + 1:] for x in s['slots'])}")
        for kind, rel in s["artifacts"].items():
            how = {True: " (XLA-compiled)", False: " (plain ops)"}.get(manifest.get("saved_model_xla")) \
                if kind == "saved_model" else ""
            print(f"    {kind}: {os.path.join(out, rel)}{how}")
    for kind, rel in manifest.get("model_artifacts", {}).items():
        print(f"  whole model, {kind}: {os.path.join(out, rel)}")
    if "parity" in manifest:
        worst = max((row[1] for row in manifest["parity"]["rows"] if row[1] is not None), default=None)
        print(f"  whole-model parity vs the Keras model: {'passed' if manifest['parity']['passed'] else 'FAILED'}"
              + (f" (max abs err {worst:.2e}); {os.path.join(out, 'model_parity.json')}" if worst is not None else ""))
    for warning in manifest.get("warnings", []):
        print(f"  warning: {warning}")
    print(f"  {len(manifest['copied'])} other variables copied, {len(manifest['dropped'])} dropped"
          + (f", {len(manifest['replaced'])} stored canonical tensors replaced" if manifest["replaced"] else ""))
    print(f"  checkpoint: {os.path.join(out, 'checkpoint')}   manifest: {os.path.join(out, 'manifest.json')}")


def main(argv=None):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    args = build_parser().parse_args(argv)
    want_json = getattr(args, "json", False)
    try:
        from . import converter as api

        progress = None if getattr(args, "quiet", False) else (
            lambda message: print(message, file=sys.stderr, flush=True))
        if args.command == "inspect":
            report = api.inspect_checkpoint(args.checkpoint, variable=args.variable, **_flags(args))
            print(json.dumps(report, indent=2)) if want_json else _print_inspect(report)
        elif args.command == "verify":
            from . import verify

            report = verify.verify(args.out, atol=args.atol, rtol=args.rtol, seed=args.seed, progress=progress)
            print(json.dumps(report, indent=2)) if want_json else print(verify.format_table(report))
            return 0 if report["passed"] else 1
        elif args.command == "bench":
            from . import benchmark

            report = benchmark.bench(args.out, steps=args.steps, repeat=args.repeat, progress=progress)
            print(json.dumps(report, indent=2)) if want_json else print(benchmark.format_table(report))
        else:
            formats = [f.strip() for f in args.formats.split(",") if f.strip()] if args.formats else None
            manifest = api.convert(args.checkpoint, args.out, style=args.style, formats=formats,
                                   variable=args.variable, force=args.force,
                                   drop_optimizer_slots=args.drop_optimizer_slots,
                                   allow_nonfinite=args.allow_nonfinite, xla=args.xla, progress=progress,
                                   **_flags(args))
            print(json.dumps(manifest, indent=2)) if want_json else _print_convert(manifest, args.out)
        return 0
    except CudnnPortError as e:
        return _fail(f"cudnn-port: error: {e}", 2, want_json)
    except BrokenPipeError:  # output piped into e.g. head, which stopped reading
        return 0
    except KeyboardInterrupt:
        return _fail("cudnn-port: interrupted; nothing was written", 130, want_json)
    except Exception as e:  # internals never leak tracebacks to CLI users
        if os.environ.get("CUDNN_PORT_DEBUG"):
            raise
        return _fail(f"cudnn-port: internal error: {type(e).__name__}: {e} "
                     "(rerun with CUDNN_PORT_DEBUG=1 for the traceback, and report it)", 1, want_json)


def _fail(message, code, want_json):
    print(" ".join(message.split()), file=sys.stderr)
    if want_json:
        print(json.dumps({"error": message, "exit_code": code}))
    return code


if __name__ == "__main__":
    sys.exit(main())
