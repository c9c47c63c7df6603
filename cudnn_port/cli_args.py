"""The command line's arguments: ``cudnn-port``'s parser (:func:`build_parser`) and how a bad one is said
(:class:`UsageError`, one line, exit 2)."""
import argparse
import math
from typing import Any, Dict, List, NoReturn
import difflib
import re

from . import formats
from ._version import __version__
from .cli_text import run_flags
from .errors import CudnnPortError
from .layout import MODES
from .keras_models.model_inputs import IDS_DTYPES
from .targets import STYLES


EPILOG = """examples:
  cudnn-port inspect train/model.ckpt
  cudnn-port convert train/model.ckpt out/ --mode lstm --num-layers 2 --num-units 512 --bidirectional
  cudnn-port convert train/model.ckpt out/ --style pytorch --json
  cudnn-port convert keras2_model.h5 out/            (Keras 2 CuDNNLSTM/CuDNNGRU -> Keras 3 and the rest)
  cudnn-port convert exported_on_gpu/ out/           (a SavedModel with CudnnRNNV3 nodes -> CPU SavedModel, ONNX)
  cudnn-port convert model.keras out/                (a Keras 3 model of LSTM/GRU/Bidirectional layers, or
  cudnn-port convert model.h5 out/                    cudnn_port.layers; .keras or Keras 3's .h5 -> CPU export)
  cudnn-port convert model.keras out/ --quantize int8  (with int8 ONNX models beside the float32 ones)
  cudnn-port convert model.pt out/                   (a PyTorch file: each nn.LSTM / nn.GRU / nn.RNN a stack)
  cudnn-port verify out/
  cudnn-port bench out/ --json
exit codes: 0 ok, 1 failed parity check or internal error, 2 bad input or usage, 130/143 interrupted"""

SOURCE_HELP = ("a Keras 3 model file (.keras, or model.save('m.h5')) of stock LSTM / GRU / Bidirectional layers or "
               "cudnn_port.layers, any backend and precision policy; a Keras 2 .h5 file with CuDNNLSTM/CuDNNGRU "
               "layers; a PyTorch file holding nn.LSTM / nn.GRU / nn.RNN modules (torch.save, TorchScript or "
               "safetensors; read as data, nothing in it runs); a torch.export .pt2 program (the whole model, its "
               "graph read as data; a TorchScript trace likewise, its code parsed as data); a SavedModel folder "
               "whose graph holds CudnnRNN/V2/V3 nodes; or a TensorFlow checkpoint holding a cuDNN buffer (prefix, "
               "its .index file, or its folder)")
MAX_SIZE = 1 << 24  # no real stack has more layers, units or inputs than this
DASH_HINT = "a name that starts with a dash goes after --, e.g. cudnn-port convert -- -model.ckpt out/"


class UsageError(CudnnPortError):
    """A flag argparse refused: exit 2 with one line, like any bad input."""


class _Parser(argparse.ArgumentParser):
    def error(self, message) -> NoReturn:
        raise UsageError(f"{message}; see {self.prog} --help")


def _count(name, low=1, high=MAX_SIZE):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a whole number, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{name} must be between {low} and {high}, got {value}")
        return value
    return parse


def _tolerance(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a tolerance must be a number, got {text!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"a tolerance must be finite and >= 0, got {text}")
    return value


def _spec_flags(parser):
    group = parser.add_argument_group("spec (only for a bare buffer whose size fits several specs)")
    group.add_argument("--variable", metavar="NAME", help="the buffer to use (default: every *opaque_kernel)")
    group.add_argument("--mode", choices=tuple(MODES),
                       help="the cell (default: LSTM or GRU, inferred from the size; cuDNN's plain RNNs only when "
                            "named)")
    group.add_argument("--num-layers", type=_count("--num-layers", high=64), metavar="N",
                       help="stacked layers (default: inferred)")
    group.add_argument("--num-units", type=_count("--num-units"), metavar="H", help="hidden size (default: inferred)")
    group.add_argument("--input-size", type=_count("--input-size"), metavar="I",
                       help="features per step at the first layer (default: inferred)")
    group.add_argument("--num-proj", type=_count("--num-proj"), metavar="P", help="LSTM projection size (cuDNN "
                       "LSTMP; never guessed from the size; default: none)")
    directions = group.add_mutually_exclusive_group()
    directions.add_argument("--bidirectional", action="store_true", default=None,
                            help="two directions (default: inferred)")
    directions.add_argument("--unidirectional", dest="bidirectional", action="store_false",
                            help="one direction (default: inferred)")


def flag_values(args: argparse.Namespace) -> Dict[str, Any]:
    return dict(mode=args.mode, num_layers=args.num_layers, num_units=args.num_units, input_size=args.input_size,
                bidirectional=args.bidirectional, num_proj=args.num_proj)


def _common(parser, quiet=True):
    parser.add_argument("--json", action="store_true", help="print one JSON object, errors too (default: text)")
    if quiet:  # the commands that load and run models: --quiet, --trust-source
        run_flags(parser)
    parser.add_argument("--verbose", action="store_true", help="let TensorFlow's, onnxruntime's and the other "
                        "libraries' own log lines through to stderr (for debugging; also CUDNN_PORT_VERBOSE=1)")


IDS_HELP = ("the dtype every artifact of a Keras 3 model takes for an input an Embedding reads: int64 as NumPy and "
            "most tokenizers give ids, float32 as Keras also takes them (default: int32, or the dtype the model's "
            "keras.Input states)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="cudnn-port", description="Convert cuDNN RNN weights (opaque buffers) into canonical per-cell"
                     " weights and CPU artifacts that TensorFlow, Keras, ONNX Runtime and PyTorch load, and check "
                     "them against cuDNN's math. Needs no GPU.",
                     epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"cudnn-port {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)

    p = sub.add_parser("inspect", help="list variables, cuDNN buffers and the specs that fit them",
                       description="List a source's variables, each cuDNN stack, how it was found and how it will "
                       "convert; for a bare buffer, every spec that fits its size, ranked by clues from the rest of "
                       "the checkpoint.")
    p.add_argument("checkpoint", metavar="SOURCE", help=SOURCE_HELP)
    _spec_flags(p)
    p.add_argument("--ids-dtype", choices=IDS_DTYPES, help=IDS_HELP)
    _common(p, quiet=False)

    p = sub.add_parser("convert", help="write canonical weights, CPU artifacts and a manifest to OUT/",
                       description="Convert every cuDNN stack of SOURCE into canonical per-cell tensors. Writes "
                       "OUT/checkpoint/ (name-based, other variables copied unchanged), the chosen --formats and "
                       "OUT/manifest.json. A SavedModel with cuDNN nodes becomes OUT/saved_model/ and "
                       "OUT/model.onnx; a Keras 3 model (.keras or .h5, stock LSTM / GRU / Bidirectional layers or "
                       "cudnn_port layers) is exported whole, each recurrent layer as a fused LSTM / GRU, and checked "
                       "against Keras' own outputs of it (exit 1 if that check fails). OUT appears whole or not at "
                       "all; SOURCE is never modified.")
    p.add_argument("checkpoint", metavar="SOURCE", help=SOURCE_HELP)
    p.add_argument("out", metavar="OUT", help="output folder (must not exist or be empty, unless --force)")
    _spec_flags(p)
    out = p.add_argument_group("output")
    out.add_argument("--style", choices=tuple(STYLES),
                     help="names and layout of the converted tensors in OUT/checkpoint (default for a checkpoint: "
                     "tf1, CudnnCompatibleLSTMCell/GRUCell names under the buffer's scope; for a Keras .h5 file: "
                     "keras, which also rebuilds a full model in Keras 3 as OUT/keras/model.keras; for a .keras "
                     "model: keras, or tf1 for a layer with projection)")
    out.add_argument("--formats", metavar="LIST", help="comma-separated artifacts: " + formats.help_text() +
                     "; default: checkpoint, the style's own (keras or pytorch), " +
                     ", ".join(f for f in formats.default_formats() if f != "checkpoint"))
    out.add_argument("--xla", action="store_true", help="compile the SavedModel's forward pass with XLA: about 2.5x "
                     "faster at batch 1 in Python TensorFlow, but TensorFlow Serving (unless started with "
                     "--xla_cpu_compilation_enabled), TF Java and the C API cannot run it. Default: plain ops, which "
                     "every runtime serves")
    out.add_argument("--no-xla", dest="xla", action="store_false", help=argparse.SUPPRESS)  # the old default's opt-out
    out.add_argument("--quantize", choices=formats.derived_names(), help="also write int8 ONNX models (onnxruntime "
                     "dynamic quantization) next to the fp32 ones; verify judges them with their own tolerance")
    out.add_argument("--ids-dtype", choices=IDS_DTYPES, help=IDS_HELP)
    out.add_argument("--force", action="store_true", help="replace OUT if it is an earlier cudnn-port output "
                     "(default: OUT must not exist or be empty)")
    out.add_argument("--drop-optimizer-slots", action="store_true",
                     help="leave out the buffer's optimizer slots (…/Adam, …/Adam_1) instead of converting them "
                     "(default: converted)")
    out.add_argument("--allow-nonfinite", action="store_true", help="convert buffers and slots holding NaN/Inf "
                     "(default: refused)")
    out.add_argument("--prefer-buffer", action="store_true", help="convert from the buffer even where canonical "
                     "tensors stored beside it disagree with it (normally an error)")
    out.add_argument("--keep-failed", action="store_true", help="keep OUT when the whole-model parity check of a "
                     ".keras export fails (the exit code is still 1)")
    _common(out)

    p = sub.add_parser("verify", help="check every artifact, signature and file of OUT",
                       description="Check every file of a convert output against its recorded sha256, and run "
                       "every artifact (checkpoint restored into stock TF1 cells / Keras layers / PyTorch modules, "
                       "both SavedModel signatures, GraphDef, ONNX with and without states, Keras and PyTorch "
                       "files, int8 models) on seeded ragged batches against the NumPy reference of cuDNN's math. "
                       "Prints a table, writes OUT/parity.json, exits 1 on any failure; a row no independent judge "
                       "could judge is a failure unless --allow-unjudged.")
    p.add_argument("out", metavar="OUT", help="a cudnn-port convert output folder")
    p.add_argument("--atol", type=_tolerance, default=1e-5, help="absolute tolerance (default 1e-5)")
    p.add_argument("--rtol", type=_tolerance, default=1e-4, help="relative tolerance (default 1e-4)")
    p.add_argument("--seed", type=_count("--seed", low=0, high=2 ** 63 - 1), default=0,
                   help="seed of the random batches every artifact runs on (default 0)")
    p.add_argument("--source", metavar="PATH", help="where the source OUT was converted from is now, if it moved "
                   "(its files must hash as OUT/manifest.json records; default: the recorded path, else a folder "
                   "next to OUT holding those files)")
    p.add_argument("--allow-unjudged", action="store_true", help="accept rows no independent judge could judge (an "
                   "original SavedModel gone, changed, or of another platform's gate layout; a Keras 2 .h5 source "
                   "gone): they are shown as NOT JUDGED (a SavedModel's artifacts compared with the converted "
                   "SavedModel only), and the verdict says 'PASSED (N rows not judged)' (default: such rows fail)")
    _common(p)

    p = sub.add_parser("bench", help="CPU latency and throughput of each artifact of OUT",
                       description="Time each artifact of a convert output on CPU at batch 1 and 32.")
    p.add_argument("out", metavar="OUT", help="a cudnn-port convert output folder")
    p.add_argument("--steps", type=_count("--steps", high=100000), default=100, help="sequence length (default 100)")
    p.add_argument("--repeat", type=_count("--repeat", high=10000), default=5,
                   help="timed runs per case; the median is shown (default 5)")
    _common(p)
    return parser


def parse(argv: List[str]) -> argparse.Namespace:
    parser = build_parser()
    try:
        return parser.parse_args(argv)
    except UsageError as e:  # a name that starts with a dash reads as an unknown flag: say how to pass it
        near = _nearest_flag(parser, argv, str(e))
        if near:
            raise UsageError(f"{e}; did you mean {near}?") from None
        known = {o for p in [parser, *_commands(parser).values()]
                 for o in p._option_string_actions}
        if ("required" in str(e) or "unrecognized" in str(e)) and any(
                a.startswith("-") and a.split("=")[0] not in known and not a.lstrip("-").replace(".", "").isdigit()
                for a in argv[:argv.index("--") if "--" in argv else len(argv)]):
            raise UsageError(f"{e}; {DASH_HINT}") from None
        raise


def _commands(parser: argparse.ArgumentParser) -> Dict[str, argparse.ArgumentParser]:
    """{command: its parser} of ``parser``'s subcommands."""
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def _nearest_flag(parser: argparse.ArgumentParser, argv: List[str], message: str):
    """The valid flag nearest to the first one argparse's ``message`` calls unrecognized ("--forse" -> "--force"),
    among the options of the command given (the first argument, as argparse reads it), or None."""
    found = re.search(r"unrecognized arguments: (\S+)", message)
    if not found or not found.group(1).startswith("--"):
        return None
    commands = _commands(parser)
    command = argv[0] if argv and argv[0] in commands else None
    options = (commands[command] if command else parser)._option_string_actions
    near = difflib.get_close_matches(found.group(1).split("=")[0], sorted(o for o in options if o.startswith("--")),
                                     n=1, cutoff=0.6)
    return near[0] if near else None
