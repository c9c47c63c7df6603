"""The CLI's reports for a person (``--json`` prints the same dicts as JSON)."""
import os
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Union
from .layout import RNNSpec
from .manifest_records import SpecRecord

if TYPE_CHECKING:
    import argparse

    from .manifest import Manifest

MAX_MESSAGE = 300  # characters of a one-line message, not counting the paths it quotes
SPEC_FIELDS = ("mode", "num_layers", "num_units", "input_size", "bidirectional", "dtype", "num_proj", "reset_after",
               "activation", "recurrent_activation")


TRUST_HELP = ("run a SavedModel or frozen graph even where it holds ops beyond pure computation (files, network, "
              "queues, Python callbacks), which are otherwise refused; only for a model you trust (docs/safety.md)")


def run_flags(parser: "argparse.ArgumentParser") -> None:
    """The flags of the commands that load and run models (convert, verify, bench)."""
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument("--trust-source", action="store_true", help=TRUST_HELP)


def trusting(args: "argparse.Namespace") -> dict:
    """``trust_source=True`` for the library call where ``--trust-source`` was given."""
    return {"trust_source": True} if getattr(args, "trust_source", False) else {}


def describe(spec: Union[Dict[str, Any], SpecRecord]) -> str:
    """RNNSpec.describe() of a spec dict from a report (candidates carry extra keys: score, reasons) or a manifest's
    spec record."""
    return RNNSpec(**{k: spec[k] for k in SPEC_FIELDS if k in spec}).describe()


BECOMES = {"lstm": "fused ONNX LSTM, TFLite UNIDIRECTIONAL_SEQUENCE_LSTM",
           "gru": "fused ONNX GRU, TFLite builtin ops (LiteRT has no GRU op)",
           "rnn_tanh": "fused ONNX RNN (Tanh), TFLite UNIDIRECTIONAL_SEQUENCE_RNN",
           "rnn_relu": "fused ONNX RNN (Relu), TFLite UNIDIRECTIONAL_SEQUENCE_RNN"}


ONNX_NAMES = {"tanh": "Tanh", "relu": "Relu", "sigmoid": "Sigmoid", "hard_sigmoid": "HardSigmoid",
              "linear": "Affine", "softsign": "Softsign", "softplus": "Softplus", "elu": "Elu",
              "leaky_relu": "LeakyRelu", "celu": "Elu", "silu": "Silu", "gelu": "Gelu", "selu": "Selu",
              "relu6": "Relu6", "exponential": "Exp",
              "mish": "Mish", "hard_silu": "HardSwish", "log_sigmoid": "LogSigmoid", "tanh_shrink": "TanhShrink",
              "hard_tanh": "HardTanh", "hard_shrink": "HardShrink", "soft_shrink": "SoftShrink",
              "sparse_plus": "SparsePlus", "squareplus": "Squareplus", "sparse_sigmoid": "HardSigmoid",
              "softmax": "Softmax", "log_softmax": "LogSoftmax", "sparsemax": "Sparsemax"}
SEQUENCE_FUNCTIONS = ("Sigmoid", "Tanh", "Relu")  # what a fused node keeps (exports.onnx_scan): OpenVINO runs these


def becomes(spec: Dict[str, Any]) -> str:
    """What a stack of ``spec`` (a spec dict) becomes in ONNX and TFLite, in a user's words."""
    mode, act = spec["mode"], spec.get("activation", "relu" if spec["mode"] == "rnn_relu" else "tanh")
    gates, after = spec.get("recurrent_activation", "sigmoid"), spec.get("reset_after", True)
    if act == ("relu" if mode == "rnn_relu" else "tanh") and gates == "sigmoid" and after:
        return BECOMES[mode]
    names = [ONNX_NAMES[act]] if mode.startswith("rnn") else \
        [ONNX_NAMES[gates]] + [ONNX_NAMES[act]] * (2 if mode == "lstm" else 1)
    op = "RNN" if mode.startswith("rnn") else mode.upper()
    notes = ["linear_before_reset=0"] * (not after) + [f"activations {', '.join(names)}"]
    onnx = f"fused ONNX {op} ({'; '.join(notes)})"
    if any(name not in SEQUENCE_FUNCTIONS for name in names):
        onnx = f"ONNX {op} as a Scan loop ({'; '.join(notes)}: OpenVINO's fused nodes run only Sigmoid, Tanh, Relu)"
    elif op != "RNN" and gates != "sigmoid":
        onnx = f"ONNX {op} as a Scan loop ({'; '.join(notes)}: it stops at each length itself)"
    if mode == "gru":
        return f"{onnx}, TFLite builtin ops (LiteRT has no GRU op)"
    if op == "RNN":
        fused = {"tanh": "TANH", "relu": "RELU", "linear": "NONE"}  # the fused op's activation function
        return f"{onnx}, " + (f"TFLite UNIDIRECTIONAL_SEQUENCE_RNN ({fused[act]})" if act in fused
                              else f"TFLite builtin ops (its fused RNN has no {act} activation)")
    if act not in ("tanh", "relu") or gates != "sigmoid":
        what = f"{act} cell activation" if act not in ("tanh", "relu") else f"{gates} gates"
        return f"{onnx}, TFLite builtin ops (its fused LSTM has no {what})"
    return f"{onnx}, TFLite UNIDIRECTIONAL_SEQUENCE_LSTM ({act.upper()})"


def layer_line(entry: Dict[str, Any]) -> str:
    """A user's recurrent layer and what it becomes: "LSTM 'lstm' (1-layer ..., hidden 32) -> fused ONNX LSTM, ..."."""
    cell = f" cell {'.'.join(map(str, entry['cell']))}" if "cell" in entry else ""  # of an RNN(StackedRNNCells)
    cell += f" ({entry['direction']})" if "direction" in entry else ""  # of a Bidirectional of one
    return f"{entry['type']} {entry['layer']!r}{cell} ({describe(entry['spec'])}) -> {becomes(entry['spec'])}"


def io_line(inputs: List[Dict[str, Any]], outputs: Optional[List[Dict[str, Any]]] = None) -> str:
    """What the artifacts take (and return): "takes input_layer int32 [batch, time]; returns output_0 ..."."""
    def one(r):
        roles = r.get("axes") or ["batch", "time"]  # recorded where the batch is not first (time-major inputs)
        dims = [str(d) if d is not None else roles[i] if i < len(roles) and roles[i] else "?"
                for i, d in enumerate(r["shape"])]
        key = f" ({r['key']!r})" if r.get("key") else ""  # which of a dict of outputs
        return f"{r['name']}{key} {r['dtype']} [{', '.join(dims)}]"
    text = "every artifact takes " + ", ".join(map(one, inputs))
    return text + ("; returns " + ", ".join(map(one, outputs)) if outputs else "")


def inspect_text(report: Dict[str, Any], verbose: bool = False) -> str:
    """inspect's report (``verbose``: a Keras model's cuDNN buffers and spec flags too)."""
    lines = [f"{report['checkpoint']}  [{report['format']}]"]
    if "model_inputs" in report and not verbose:
        return "\n".join(_keras_model_lines(report))
    if "nodes" in report:
        lines.append(f"signatures: {', '.join(report['signatures'])}")
        for n in report["nodes"] + report.get("gpu_alternatives", []):  # called, then GPU alternatives
            lines += [f"  {n['node']} ({n['op']}) in {n['function'] or 'the main graph'}",
                      f"    converts as: {n['converts_as']}"]
        lines.append(f"writes: {', '.join(report['plan']['artifacts'])}")
        return "\n".join(lines + _graph_lines(report))
    lines.append(f"{len(report['variables'])} variables:")
    lines += [f"  {v['name']:<60} {str(v['shape']):<16} {v['dtype']}" for v in report["variables"]]
    for r in report.get("stock_layers", []):  # stock Keras recurrent layers: what becomes of each
        why = f" ({r['why']})" if r["why"] else ""
        lines.append(f"stock layer {r['layer']} ({r['type']}): {r['verdict']}{why}")
    for s in report["stacks"]:
        lines += ["", f"cuDNN stack {s['variable']}: {s['size']} elements, {s['dtype']}", f"  found: {s['found']}"]
        if s.get("batch_first") is not None:  # a PyTorch module: its own input layout (the artifacts' is docs')
            lines.append(f"  the module took batch_first={s['batch_first']} input; every artifact takes "
                         "[batch, time, features] (docs/runtimes.md)")
        if s.get("problem") and not s["candidates"]:  # a spec only a flag can settle: no candidates to rank
            lines.append(f"  {s['problem'].split(': ', 1)[-1]}")
            continue
        if s["spec"]:
            plan = s["plan"]
            lines += [f"  converts as: {describe(s['spec'])}  ({s['how']})"]
            lines += [f"  flags: {s['flags']}"] if s["flags"] else []  # a cell no flag selects: stated by its layer
            if plan.get("problem"):
                lines.append(f"  style {plan['style']} cannot hold it: {plan['problem']}")
            else:
                scheme = f", {plan['scheme']} names" if plan["scheme"] else ""
                lines += [f"  writes (style {plan['style']}{scheme}): {plan['layer_0_names'][0]}, ...",
                          f"  artifacts: {', '.join(plan['artifacts'])}"]
        else:
            lines.append(f"  {s['candidate_count']} specs fit; best first:")
            for c in s["candidates"][:8]:
                why = f"  <- {', '.join(c['reasons'])}" if c["reasons"] else ""
                lines.append(f"    {describe(c)}{why}")
            lines.append(f"  to choose, pass {', '.join(s['settle_with']) or 'the spec flags'}")
    return "\n".join(lines)


def convert_text(manifest: "Manifest", out: str, verbose: bool = False) -> str:
    """convert's manifest (``verbose``: a whole Keras model's cuDNN buffers and per-layer files too)."""
    lines, stacks = [], manifest.stacks
    if manifest.road == "model" and manifest.model_layers and not verbose:
        return "\n".join(_keras_export_lines(manifest, out))
    if manifest.road == "graph":
        nodes, uncalled = manifest.nodes or [], manifest.uncalled_functions_dropped
        dropped = uncalled.with_cudnn_ops if uncalled else {}
        lines.append(f"replaced {len(nodes)} cuDNN nodes of {manifest.source.checkpoint}"
                     + (f"; dropped {len(dropped)} functions nothing calls that held cuDNN ops" if dropped else ""))
        lines += [f"  {n.node} ({n.op}): {describe(n.spec)}" for n in nodes]
        lines += [f"  {n.node} ({n.op}, GPU alternative; fused in model.onnx): {describe(n.spec)}"
                  for n in manifest.gpu_alternatives or []]
        lines += [f"  {kind}: {os.path.join(out, rel)}" for kind, rel in manifest.model_artifacts.items()]
        lines += [f"  warning: {w}" for w in manifest.warnings]
        lines.append(f"  manifest: {os.path.join(out, 'manifest.json')}")
        return "\n".join(lines)
    lines.append(f"converted {len(stacks)} cuDNN stack{'s' if len(stacks) != 1 else ''} from "
                 f"{manifest.source.checkpoint}")
    for s in stacks:
        lines += [f"  {s.variable}: {describe(s.spec)} ({s.spec_source})",
                  f"    -> {len(s.targets)} tensors, e.g. {s.targets[0]}"]
        if s.slots:
            lines.append(f"    optimizer slots converted: {', '.join(x[len(s.variable) + 1:] for x in s.slots)}")
        for kind, rel in s.artifacts.items():
            xla = manifest.saved_model_xla if kind == "saved_model" else None
            how = "" if xla is None else " (XLA-compiled)" if xla else " (plain ops)"
            lines.append(f"    {kind}: {os.path.join(out, rel)}{how}")
    lines += [f"  whole model, {kind}: {os.path.join(out, rel)}" for kind, rel in manifest.model_artifacts.items()]
    lines += _parity_lines(manifest, out)
    replaced = manifest.replaced
    lines.append(f"  {len(manifest.copied or [])} other variables copied, {len(manifest.dropped or [])} dropped"
                 + (f", {len(replaced)} stored canonical tensors replaced" if replaced else ""))
    lines.append(f"  checkpoint: {os.path.join(out, 'checkpoint')}   manifest: {os.path.join(out, 'manifest.json')}")
    return "\n".join(lines)


def _keras_export_lines(manifest, out) -> list:
    """convert of a Keras model in the user's terms: each recurrent layer and what it became, the whole model's
    artifacts and what they take, parity; cuDNN buffer names stay in the manifest and --verbose."""
    layers = manifest.model_layers
    lines = [f"converted {manifest.source.checkpoint}: {len(layers)} recurrent "
             f"layer{'s' if len(layers) != 1 else ''} fused"]
    lines += [f"  {layer_line(entry)}" for entry in layers]
    lines += [f"  {kind}: {os.path.join(out, rel)}" for kind, rel in manifest.model_artifacts.items()]
    lines.append(f"  each layer alone (step functions for decoding): {os.path.join(out, 'layers')}")
    if manifest.not_asked_for:
        lines.append(f"  not written (not in --formats): {', '.join(manifest.not_asked_for)}")
    if manifest.model_input_specs:
        lines.append("  " + io_line(manifest.model_input_specs, manifest.model_output_specs))
    lines += _parity_lines(manifest, out)
    lines.append(f"  checkpoint: {os.path.join(out, 'checkpoint')}   manifest: {os.path.join(out, 'manifest.json')}")
    return lines


def _parity_lines(manifest, out) -> list:
    lines = []
    parity, p = manifest.parity, manifest.precision
    if parity is not None:
        worst = max((row[1] for row in parity.rows if row[1] is not None and row[2] is not None), default=None)
        lines.append(f"  whole-model parity vs {parity.judge or 'the judge'}: "
                     f"{'passed' if parity.passed else 'FAILED'}"
                     + (f" (max abs err {worst:.2e}); {os.path.join(out, 'model_parity.json')}"
                        if worst is not None else ""))
    if p is not None:
        distance = p.max_abs_to_original
        lines.append(f"  the model computes in {p.policy}: the artifacts compute in float32 and match it in "
                     f"float32; the original's own {p.policy} outputs differ from them by "
                     + (f"{distance:.2e} (max abs, reported, not judged)" if distance is not None else
                        "an unknown amount (the original did not run here; see model_parity.json)"))
    return lines + [f"  warning: {w}" for w in manifest.warnings]


def _keras_model_lines(report) -> list:
    """inspect of a Keras model in the user's terms: its recurrent layers, what each becomes, the artifacts'
    inputs (the cuDNN buffers and spec flags are for --verbose)."""
    buffers = {s["variable"] for s in report["stacks"]}
    lines = [f"{report['checkpoint']}  [{report['format']}]", "variables:"]
    lines += [f"  {v['name']:<60} {str(v['shape']):<16} {v['dtype']}" for v in report["variables"]
              if v["name"] not in buffers]
    fused = [s for s in report["stacks"] if s.get("spec")]
    several = len(fused) != 1
    lines.append(f"{len(fused)} recurrent layer{'s' if several else ''} convert{'' if several else 's'}:")
    lines += [f"  {layer_line(s)}" for s in fused]
    lines += [f"  {r['type']} {r['layer']!r}: refused ({r['why']})" for r in report.get("stock_layers", [])
              if r["verdict"] != "fused"]
    lines.append(io_line(report["model_inputs"]))
    lines += [f"warning: {w}" for w in report.get("warnings", [])]
    if fused:
        lines.append(f"writes: {', '.join(fused[0]['plan']['artifacts'])}")
    return lines


def _graph_lines(report) -> list:
    """What a SavedModel's graph runs beyond pure computation (the op allow-list), and which commands run it."""
    found = report.get("beyond_compute")
    if found is None:
        return []
    lines = [f"beyond pure computation: {len(found)} node(s), refused unless --trust-source" if found else
             "beyond pure computation: nothing (every op is on the allow-list)"]
    lines += [f"  {f['node']} ({f['op']}) in {f['function'] or 'the main graph'}: {f['why']}" for f in found[:20]]
    return lines + ([f"  and {len(found) - 20} more"] if len(found) > 20 else []) + [report["runs_graph"]]


def one_line(message: str, limit: int = MAX_MESSAGE) -> str:
    """``message`` on one line, at most about ``limit`` characters besides the paths it quotes: a longer one is cut
    in its middle, keeping its last clause (after the last "; "), which says how to fix the problem.

    >>> one_line("cudnn-port: error: " + "x" * 400 + "; pass --mode", limit=40)
    'cudnn-port: error: xxxxxxx…; pass --mode'
    """
    message = " ".join(str(message).split())
    paths = sum(len(word) for word in message.split() if _is_path(word.strip("()[],;:'\"")))
    if len(message) - paths <= limit:
        return message
    head, _, fix = message.rpartition("; ")
    if not head or len(fix) > limit // 2:
        head, fix = message, ""
    keep = max(limit + paths - len(fix) - 3, 20)
    return head[:keep].rstrip() + "…" + (f"; {fix}" if fix else "")


def _is_path(word):
    return os.sep in word and (os.path.isabs(word) or os.path.lexists(word))


def failed_rows(report: Dict[str, Any]) -> str:
    """verify's failed rows, for its one stderr line."""
    failed = [f"{r['artifact']} ({r['stack']})" if r.get("stack") not in (None, "(all)") else r["artifact"]
              for r in report["rows"] if r["passed"] is False]
    return f"{len(failed)} of {len(report['rows'])} rows failed: " + "; ".join(failed[:3]) + \
        (f" and {len(failed) - 3} more" if len(failed) > 3 else "")
