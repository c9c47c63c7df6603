"""``cudnn-port``: the command line, a thin shell over :func:`cudnn_port.convert`, ``inspect``, ``verify``, ``bench``.

Exit codes: 0 ok; 1 a failed parity check (verify, or the whole-model check of ``convert model.keras``) or an
internal error; 2 bad input or usage (one line saying what and how to fix it); 130 interrupted by SIGINT, 143 by
SIGTERM (nothing half-written is left). With ``--json`` every outcome, errors included, is one JSON object.
"""
import json
import os
import signal
import sys
from typing import TYPE_CHECKING, Any, Callable, Dict, NoReturn, Optional, Sequence, Tuple

from .cli_args import flag_values, parse
from .cli_text import failed_rows, one_line, trusting
from .errors import CudnnPortError, ParityError, reason
from . import cli_text
from .benchmark import bench, format_table as bench_table
from .converter import convert
from .inspection import inspect_source
from .deps import missing_message
from .outdir import disk_error
from .quiet import quiet_stderr
from .signals import raised_signal, signals_interrupt, was_published
from .verify import format_table as verify_table, verify

if TYPE_CHECKING:
    import argparse


def run(args: "argparse.Namespace", progress: Callable[[str], None]) -> Tuple[int, Dict[str, Any], str]:
    """Run the parsed command; returns (exit code, JSON-ready result, text for a person)."""
    if args.command == "inspect":
        report = inspect_source(args.checkpoint, variable=args.variable, ids_dtype=args.ids_dtype, **flag_values(args))
        return 0, report, cli_text.inspect_text(report, args.verbose)
    if args.command == "verify":
        report = verify(args.out, atol=args.atol, rtol=args.rtol, seed=args.seed, progress=progress, source=args.source,
                        allow_unjudged=args.allow_unjudged, **trusting(args))
        return (0 if report["passed"] else 1), report, verify_table(report)
    if args.command == "bench":
        report = bench(args.out, steps=args.steps, repeat=args.repeat, progress=progress, **trusting(args))
        return 0, report, bench_table(report)

    formats = None if args.formats is None else [f.strip() for f in args.formats.split(",") if f.strip()]
    manifest = convert(args.checkpoint, args.out, style=args.style, formats=formats, variable=args.variable,
                       force=args.force, drop_optimizer_slots=args.drop_optimizer_slots, **trusting(args),
                       allow_nonfinite=args.allow_nonfinite, prefer_buffer=args.prefer_buffer, xla=args.xla,
                       quantize=args.quantize, keep_failed=args.keep_failed, ids_dtype=args.ids_dtype,
                       progress=progress, **flag_values(args))
    return 0, manifest.to_dict(), cli_text.convert_text(manifest, args.out, args.verbose)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line ``argv``; returns the exit code. Only cudnn-port's own lines reach stderr (progress,
    and one line per failure): other libraries' logging is filtered out (:mod:`cudnn_port.quiet`) unless
    ``--verbose`` or ``CUDNN_PORT_VERBOSE=1``."""
    argv = sys.argv[1:] if argv is None else list(argv)
    verbose = "--verbose" in argv[:argv.index("--") if "--" in argv else len(argv)]
    with quiet_stderr(verbose):  # before anything imports TensorFlow, which reads its environment once
        return _main(argv)


def _main(argv):
    want_json = "--json" in argv
    code = _in_context(argv, want_json)
    late = raised_signal()
    if late is not None and code not in (128 + signal.SIGINT, 128 + signal.SIGTERM):
        return _interrupted(late, was_published(), want_json)  # it arrived as the context closed: recorded only
    return code


def _in_context(argv, want_json):
    args = None
    with signals_interrupt(lambda signum, published: _interrupted(signum, published, want_json)):
        try:
            args = parse(argv)
            progress = None if getattr(args, "quiet", False) else (
                lambda message: print(message, file=sys.stderr, flush=True))
            code, result, text = run(args, progress)
            print(json.dumps(result, indent=2) if want_json else text)
            if code and args.command == "verify":  # the table is on stdout; stderr says it failed, in one line
                print(one_line(f"cudnn-port: verify FAILED: {failed_rows(result)}; see the table, or "
                               f"{os.path.join(args.out, 'parity.json')}"), file=sys.stderr)
            return code
        except KeyboardInterrupt as e:
            return _interrupted(getattr(e, "signum", signal.SIGINT), getattr(e, "published", False), want_json)
        except Exception as e:
            if raised_signal() is not None:  # a library turned our Interrupted into its own error
                return _interrupted(raised_signal(), False, want_json)
            return _error(e, want_json, getattr(args, "out", None))


def _interrupted(signum, published, want_json):
    what = "OUT was already complete and is kept" if published else "nothing was written"
    return _fail(f"cudnn-port: interrupted ({signal.Signals(signum).name}); {what}", 128 + signum, want_json)


def _error(e, want_json, out=None):
    """The one line and exit code for an exception that is not an interrupt; internals never leak tracebacks to CLI
    users. ``out``: the command's OUT, if any (a full disk is named by it)."""
    disk = disk_error(e, out or getattr(e, "filename", None) or os.getcwd())
    if disk is not None and not isinstance(e, CudnnPortError):
        return _fail(f"cudnn-port: error: {disk}", 2, want_json)
    if isinstance(e, CudnnPortError):
        return _fail(f"cudnn-port: error: {e}", 2, want_json)
    if isinstance(e, ParityError):
        return _fail(f"cudnn-port: {e}", 1, want_json, passed=False, report=e.report_path)
    if isinstance(e, BrokenPipeError):  # output piped into e.g. head, which stopped reading
        return 0
    if isinstance(e, ImportError) and missing_message(e):  # an optional piece is not installed
        return _fail(f"cudnn-port: error: {missing_message(e)}", 2, want_json)
    if os.environ.get("CUDNN_PORT_DEBUG"):
        raise e
    return _fail(f"cudnn-port: internal error: {reason(e, 120)} (rerun with CUDNN_PORT_DEBUG=1 for the "
                 "traceback, and report it)", 1, want_json)


def _fail(message, code, want_json, **extra):
    message = one_line(message)
    print(message, file=sys.stderr)
    if want_json:
        print(json.dumps({"error": message, "exit_code": code, **extra}))
    return code


def entry() -> NoReturn:
    """The console script: :func:`main`, then exit at once. Once the work is done, SIGINT and SIGTERM are ignored
    and the interpreter's teardown (seconds of TensorFlow's) is skipped, so a late signal cannot end the process
    by the signal itself after OUT was published; the exit code is the command's."""
    code = main()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":
    entry()
