"""The format registry: every format is one module of cudnn_port.formats, and everything that lists, writes, runs or
checks formats derives from it."""
import os
import subprocess
import sys

import numpy as np
import pytest

from helpers import make_spec, spec_flags, write_source
from cudnn_port import formats
from cudnn_port.errors import CudnnPortError

tf = pytest.importorskip("tensorflow")


@pytest.mark.slow
def test_every_format_module_registers_one_format_and_help_lists_them():
    registered = formats.formats()
    assert {"checkpoint", "keras", "pytorch", "saved_model", "graphdef", "onnx"} <= set(registered)
    keys = [a.key for f in registered.values() for a in f.artifacts]
    assert len(keys) == len(set(keys)), keys
    help_text = subprocess.run([sys.executable, "-m", "cudnn_port.cli", "convert", "--help"], capture_output=True,
                               text=True, check=True).stdout
    flat = " ".join(help_text.split())
    for name, fmt in registered.items():
        assert f"{name} (" in flat, name
        assert fmt.write is None or fmt.runtimes, f"{name}: verify could not run what it writes"


def test_an_unknown_format_is_refused_never_written_as_something_else(tmp_path):
    spec = make_spec("lstm", 2, True)
    src, _ = write_source(tmp_path, spec)
    with pytest.raises(CudnnPortError, match="unknown format 'graph_def'; choose from"):
        from cudnn_port import convert

        convert(src, tmp_path / "out", formats=["checkpoint", "graph_def"], **spec_flags(spec))
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_an_explicit_format_that_cannot_hold_the_stack_is_refused_a_default_one_is_skipped(tmp_path):
    """A projected LSTM: ONNX's LSTM has no projection. Asked for by name, onnx is an error before anything is
    written; left to the defaults, it is skipped with a warning in the manifest, and inspect's plan says why."""
    from cudnn_port import convert, inspect_source
    from cudnn_port.layout import RNNSpec

    spec = RNNSpec("lstm", 2, 6, 5, True, num_proj=4)
    src, _ = write_source(tmp_path, spec)
    flags = dict(spec_flags(spec), num_proj=4)
    with pytest.raises(CudnnPortError, match=r"onnx cannot hold cudnn_lstm/opaque_kernel \(ONNX's LSTM has no "):
        convert(src, tmp_path / "explicit", formats=["checkpoint", "onnx"], **flags)
    assert not (tmp_path / "explicit").exists()
    manifest = convert(src, tmp_path / "default", **flags)
    assert "onnx" not in manifest["stacks"][0]["artifacts"] and "saved_model" in manifest["stacks"][0]["artifacts"]
    assert any("model.onnx" in w and "not written: ONNX's LSTM has no projection" in w for w in manifest["warnings"])
    plan = inspect_source(src, **flags)["stacks"][0]["plan"]
    assert "model.onnx" not in plan["artifacts"] and "model.onnx" in plan["not_written"]


@pytest.mark.slow
def test_verify_and_bench_rows_come_from_each_formats_runtimes(tmp_path):
    """Every artifact of every format in every runtime, called each way its states allow, is a verify row that
    passes against the reference; bench times each benched runtime."""
    from cudnn_port import convert
    from cudnn_port.benchmark import bench
    from cudnn_port.verify import verify

    spec = make_spec("gru", 2, True)
    src, _ = write_source(tmp_path, spec)
    manifest = convert(src, tmp_path / "out", style="pytorch", **spec_flags(spec))
    report = verify(tmp_path / "out")
    assert report["passed"], [r for r in report["rows"] if r["passed"] is False]
    rows = {r["artifact"] for r in report["rows"] if r["passed"]}
    for key in manifest["stacks"][0]["artifacts"]:
        fmt, artifact = formats.artifacts()[key]
        for runtime in fmt.runtimes:
            assert any(row.startswith(artifact.label or key) and (runtime.name in row or len(fmt.runtimes) == 1)
                       for row in rows), (key, runtime.name, rows)
    benched = {r["artifact"] for r in bench(tmp_path / "out", batches=(1,), steps=3, repeat=1)["rows"]}
    assert {"saved_model", "graphdef"} <= benched and any(r.startswith("onnx") for r in benched), benched


@pytest.mark.slow
def test_a_top_level_buffer_converts_and_verifies_in_tf1_cells(tmp_path):
    """A buffer saved at the top level (no scope): the writer's and the TF1 judge's scope names must agree (they
    once differed, 'rnn/...' against '/rnn/...', which failed a correct output)."""
    from cudnn_port import convert
    from cudnn_port.verify import verify

    spec = make_spec("lstm", 2, False)
    src, _ = write_source(tmp_path, spec, name="opaque_kernel")
    manifest = convert(src, tmp_path / "out", formats=["checkpoint"], **spec_flags(spec))
    assert manifest["stacks"][0]["targets"][0].startswith("rnn/multi_rnn_cell/cell_0/")
    rows = verify(tmp_path / "out")["rows"]
    row = next(r for r in rows if r["artifact"] == "checkpoint (tf1 style)")
    assert row["passed"] and row["max_abs"] < 1e-5, row
    assert np.isfinite(row["max_abs"])


def test_every_road_a_format_writes_on_has_a_runtime_verify_runs():
    for name, fmt in formats.formats().items():
        for road in ("model", "graph"):
            part = getattr(fmt, road)
            assert part is None or part.runners(), f"{name}: verify could not run what it writes on the {road} road"


@pytest.mark.slow
def test_verify_and_bench_run_a_rewritten_graph_through_each_formats_graph_runtime(tmp_path, monkeypatch):
    """verify's rows of a converted SavedModel come from the registry: an ONNX runtime that answers 1e-3 off makes
    its row fail, and nothing else changes; bench times each artifact of the graph road."""
    import dataclasses

    from helpers import random_blob, save_raw_op_model
    from cudnn_port import convert
    from cudnn_port.benchmark import bench
    from cudnn_port.verify import verify

    spec = make_spec("lstm", 2, True)
    convert(save_raw_op_model(tmp_path / "src", spec, random_blob(spec, seed=5), "CudnnRNNV2"), tmp_path / "out")
    rows = {r["artifact"]: r for r in verify(tmp_path / "out")["rows"]}
    assert rows["onnx (onnxruntime)"]["passed"] and rows["onnx (onnxruntime)"]["max_abs"] < 1e-5, rows
    timed = {(r["artifact"], r["batch"]) for r in bench(tmp_path / "out", batches=(1, 4), steps=5, repeat=1)["rows"]}
    assert timed == {(a, b) for a in ("saved_model [serving_default]", "onnx (onnxruntime)") for b in (1, 4)}, timed

    fmt = formats.get("onnx")

    def off(path, job):
        run = fmt.graph.open(path, job)
        return lambda feeds: run(feeds)._replace(values={k: v + 1e-3 for k, v in run(feeds).values.items()})

    monkeypatch.setitem(formats.formats(), "onnx", dataclasses.replace(fmt, graph=dataclasses.replace(fmt.graph,
                                                                                                       open=off)))
    moved = {r["artifact"]: r for r in verify(tmp_path / "out")["rows"]}
    assert moved["onnx (onnxruntime)"]["passed"] is False and moved["onnx (onnxruntime)"]["max_abs"] >= 1e-3, moved
    assert {k: r["passed"] for k, r in moved.items() if k != "onnx (onnxruntime)"} == \
        {k: r["passed"] for k, r in rows.items() if k != "onnx (onnxruntime)"}


def _toy_format():
    """A format defined here and nowhere else, on every road: a stack's canonical weights as ``.npz``, run by the
    NumPy reference; a whole model's and a rewritten graph's SavedModel (what the saved_model format wrote before it)
    as a ``.tar``, run by TensorFlow from a copy unpacked at open."""
    import tarfile
    import tempfile

    from cudnn_port import reference
    from cudnn_port.canonical import CanonicalRNN, LayerParams
    from cudnn_port.formats import Artifact, Format, Road, Runtime
    from cudnn_port.formats.jobs import Outputs

    kinds = ("W", "R", "b_W", "b_R")

    def write(job, paths):  # what it returns for the manifest (keys it declares, records=) is kept there as it is
        np.savez(paths["toy"], **{f"{p}_{k}": np.asarray(getattr(layer, k)) for p, layer in enumerate(job.canon.layers)
                                  for k in kinds})
        return {"toy_arrays": len(job.canon.layers) * len(kinds)}

    def open_stack(path, job):
        data = np.load(path)
        canon = CanonicalRNN(job.spec, [LayerParams(*(data[f"{p}_{k}"] for k in kinds))
                                        for p in range(job.spec.num_pseudo_layers)])

        def run(feeds):
            return Outputs.of_stack(reference.forward(canon, feeds["inputs"], feeds["sequence_lengths"],
                                                      feeds.get("initial_h"), feeds.get("initial_c")))
        return run

    def write_tar(job, paths):
        with tarfile.open(paths["toy"], "w") as tar:
            tar.add(job.written["saved_model"], arcname="saved_model")
        return {"toy_tar": "saved_model"}

    def signature(path, name):
        folder = tempfile.mkdtemp(prefix="toy_format_")
        with tarfile.open(path) as tar:
            tar.extractall(folder, filter="data")
        return tf.saved_model.load(f"{folder}/saved_model").signatures[name]

    def open_model(path, job):
        function = signature(path, "serving_default")
        return lambda feeds: Outputs({k: v.numpy() for k, v in function(**{n: tf.constant(feeds[n])
                                                                             for n in job.input_names}).items()})

    def open_graph(path, job):
        function = signature(path, job.signature)
        return lambda feeds: Outputs({k: v.numpy() for k, v in function(**{k: tf.constant(v) for k, v in
                                                                               feeds.items()}).items()})

    return Format(name="toy", help="a test's toy format", artifacts=(Artifact("toy", "toy/{label}.npz"),),
                  write=write, runtimes=(Runtime("numpy", open_stack),), order=200, default=True,
                  records=("toy_arrays", "toy_tar"),
                  model=Road((Artifact("toy", "toy/model.tar"),), write_tar, open_model, "toy (tar)"),
                  graph=Road((Artifact("toy", "toy/model.tar"),), write_tar, open_graph, "toy (tar)"))


@pytest.mark.slow
def test_a_toy_format_defined_in_one_place_is_written_and_verified_on_every_road(tmp_path):
    """Adding a format is its definition and nothing else: registered, the toy format (a default one) is offered by
    convert's --formats, planned by inspect, written by the stack road (a TF1 checkpoint), the whole-model road (a
    Keras model) and the graph road (a SavedModel with cuDNN nodes), listed in each manifest, and judged by verify on
    each road."""
    from helpers import save_raw_op_model, tagger
    from cudnn_port import convert, export, inspect_source, verify
    from cudnn_port.cli_args import build_parser
    from cudnn_port.layout import RNNSpec

    formats.register(_toy_format())
    try:
        convert_help = build_parser()._subparsers._group_actions[0].choices["convert"].format_help()
        assert "toy (a test's toy format)" in " ".join(convert_help.split())
        spec = make_spec("gru", 2, True)
        src, _ = write_source(tmp_path, spec)
        planned = inspect_source(src, **spec_flags(spec))["stacks"][0]["plan"]["artifacts"]
        assert any(rel.startswith("toy/") and rel.endswith(".npz") for rel in planned), planned
        stacks = convert(src, tmp_path / "stacks", formats=["checkpoint", "toy"], **spec_flags(spec))
        model = export(tagger(), tmp_path / "model", formats=["saved_model", "toy"])
        blob = np.random.default_rng(3).normal(size=RNNSpec("lstm", 1, 4, 3).param_count).astype("float32") * 0.3
        graph = convert(save_raw_op_model(tmp_path / "saved", RNNSpec("lstm", 1, 4, 3), blob, "CudnnRNNV2"),
                        tmp_path / "graph", formats=["saved_model", "toy"])
        assert "toy" in stacks["stacks"][0]["artifacts"] and stacks["stacks"][0]["toy_arrays"] == 4 * 4, stacks
        assert model["toy_tar"] == graph["toy_tar"] == "saved_model"  # its own details, in the manifest
        assert model["model_artifacts"]["toy"] == graph["model_artifacts"]["toy"] == "toy/model.tar"
        for out, row in (("stacks", "toy (numpy)"), ("model", "toy (tar)"), ("graph", "toy (tar)")):
            report = verify(tmp_path / out)
            toy = [r for r in report["rows"] if r["artifact"].startswith(row)]
            assert toy and all(r["passed"] for r in toy) and report["passed"], (out, report["rows"])
    finally:
        formats.unregister("toy")


# ---------------------------------------------------------------------------------------------- the toy source

def _toy_source(swap=False):
    """A kind of source defined in one place: a ``.toyrnn`` JSON file ``{"name": {"mode", "layers", "units",
    "input", "bidirectional", "gates": [per pseudo-layer {"W": ..., "R": ..., "b_W": ..., "b_R": ...}]}}``: its
    reader packs each stack into a buffer; its judge reads the same JSON by its own rule. ``swap``: a reader with a
    bug (gates 1 and 2 of the first pseudo-layer's W exchanged)."""
    import json

    from cudnn_port.canonical import CanonicalRNN, LayerParams
    from cudnn_port.layout import RNNSpec, pack
    from cudnn_port.source import Source, SourceType

    def spec_of(entry):
        return RNNSpec(entry["mode"], entry["layers"], entry["units"], entry["input"], entry["bidirectional"])

    class ToySource(Source):
        default_style = "keras"

        def __init__(self, path):
            self.prefix, self.format = str(path), "toy RNN JSON"
            self.stacks = json.load(open(path))
            self.shapes = {f"{n}/opaque_kernel": (spec_of(e).param_count,) for n, e in self.stacks.items()}
            self.dtypes = dict.fromkeys(self.shapes, "float32")
            self.specs = {f"{n}/opaque_kernel": spec_of(e) for n, e in self.stacks.items()}

        def get(self, name):
            entry = self.stacks[name.split("/")[0]]
            spec = spec_of(entry)
            layers = [LayerParams(**{k: np.asarray(v, np.float32) for k, v in p.items()}) for p in entry["gates"]]
            if swap:
                layers[0].W[[1, 2]] = layers[0].W[[2, 1]]
            return pack(CanonicalRNN(spec, layers), "float32")

        def files(self):
            return [self.prefix]

    return SourceType("toy", "toy RNN JSON file", "stack", lambda path: str(path).endswith(".toyrnn"),
                      lambda path, mode=None: ToySource(path), order=5, judge=f"{__name__}:toy_judge")


def toy_judge(path, variable, spec):
    """The toy source's judge: its JSON by its own rule (each gate's lists), not through its reader's packing."""
    import json

    from cudnn_port.canonical import CanonicalRNN, LayerParams

    entry = json.load(open(path))[variable.split("/")[0]]
    layers = [LayerParams(**{k: np.asarray(v, np.float64) for k, v in p.items()}) for p in entry["gates"]]
    return CanonicalRNN(spec, layers), "the toy file's own lists"


@pytest.mark.slow
def test_a_toy_source_defined_in_one_place_is_inspected_converted_and_judged(tmp_path):
    """Adding a kind of source is its definition and nothing else: registered, the toy source is claimed by content,
    inspected, converted by the road it names, and judged by verify with its own judge; a reader that packs a gate
    wrongly (planted) fails verify."""
    import json

    from cudnn_port import convert, inspect_source, verify
    from cudnn_port import readers
    from cudnn_port.layout import unpack

    spec = make_spec("lstm", 2, True)
    canon = unpack(spec, np.random.default_rng(5).normal(size=spec.param_count).astype(np.float32) * 0.4)
    entry = {"mode": "lstm", "layers": 2, "units": spec.num_units, "input": spec.input_size, "bidirectional": True,
             "gates": [{k: getattr(p, k).tolist() for k in ("W", "R", "b_W", "b_R")} for p in canon.layers]}
    src = tmp_path / "model.toyrnn"
    src.write_text(json.dumps({"enc": entry}))
    readers.register(_toy_source())
    try:
        assert readers.source_kind(src) == "toy"
        report = inspect_source(src)
        assert report["format"] == "toy RNN JSON" and report["stacks"][0]["spec"]["num_layers"] == 2
        manifest = convert(src, tmp_path / "out", formats=["checkpoint", "onnx"])
        assert manifest.stacks[0].variable == "enc/opaque_kernel"
        verdict = verify(tmp_path / "out")
        assert verdict["passed"] and any(r.get("judge") == "the toy file's own lists" for r in verdict["rows"])
        readers.unregister("toy")
        readers.register(_toy_source(swap=True))  # the reader's bug, planted; the judge reads the file itself
        convert(src, tmp_path / "bad", formats=["onnx"])
        bad = verify(tmp_path / "bad")
        assert not bad["passed"] and any(r["artifact"].startswith("onnx") and r["passed"] is False
                                         for r in bad["rows"])
    finally:
        readers.unregister("toy")
    assert readers.source_kind(src) == "checkpoint"


def test_every_source_takes_a_road_the_manifest_can_record_and_a_made_up_road_is_refused():
    """A source's road is one of the three the converter drives and the manifest records (its ``kind``); a
    declaration naming a fourth fails where it is made, not later at a switch that does not know it."""
    from cudnn_port.readers import sources
    from cudnn_port.source import ROADS, SourceType

    assert set(ROADS) == {"stack", "model", "graph"}
    assert {t.road for t in sources().values()} == set(ROADS), {k: t.road for k, t in sources().items()}
    with pytest.raises(ValueError, match="road 'lane' is none of stack, model, graph"):
        SourceType("toy", "toy file", "lane", lambda path: False, None)
    with pytest.raises(ValueError, match="an exporter .* is for the model road and needed there"):
        SourceType("toy", "toy file", "model", lambda path: False, None)


def test_a_translated_source_is_told_by_its_kind_not_by_its_words():
    """A .pt2 (and a TorchScript file read whole) is translated into a Keras model, a .keras is one: the whole-model
    judge and the export's parity ask the kind (its ``translated`` field), by a file's content or by the format words
    its OUT's manifest records; a stack-road kind cannot be translated."""
    from helpers import CHAR_LM
    from cudnn_port.readers import loads_as_keras, sources, translated_from
    from cudnn_port.source import SourceType

    assert {k for k, t in sources().items() if t.translated} == {"torch_program", "torchscript"}
    here = os.path.dirname(os.path.abspath(__file__))
    program = os.path.join(here, "fixtures", "torch", "pt2", "model.pt2")
    assert loads_as_keras(CHAR_LM) and not loads_as_keras(program)
    assert not loads_as_keras(os.path.join(here, "fixtures", "keras2_cudnn_model.h5"))  # a stack-road kind
    assert translated_from(sources()["torch_program"].words) and translated_from(sources()["torchscript"].words)
    assert not any(translated_from(w) for w in ("Keras 3 model", "PyTorch file", "", None))
    with pytest.raises(ValueError, match="only a model-road kind is translated"):
        SourceType("toy", "toy file", "stack", lambda path: False, None, translated=True)


def test_every_function_a_source_names_is_there_to_call():
    """A source names its judge, its original's row and its whole-model exporter as "module:function" (modules a
    reader may not import): each imports and is a function, and the two whole-model kinds name their own exporters."""
    import inspect

    from cudnn_port.readers import sources
    from cudnn_port.roads import model

    named = {(kind, field): t.named(field) for kind, t in sources().items()
             for field in ("judge", "original", "export") if getattr(t, field)}
    assert all(inspect.isfunction(f) for f in named.values()), named
    assert named[("keras_model", "export")] is model.export_keras_file
    assert named[("torch_program", "export")] is model.export_program_file
    from cudnn_port.roads import script

    assert named[("torchscript", "export")] is script.export_script_file
    assert {kind for kind, field in named if field == "judge"} >= {"keras_h5", "pytorch", "torch_program"}


def test_cli_choices_and_convert_needs_come_from_the_modules_that_define_them(tmp_path, monkeypatch):
    """A derived artifact declared by a format alone (here a toy int4 form of the ONNX models) is a --quantize choice
    and its package is checked before work; a style added to the targets is a --style choice. Nothing else lists
    them."""
    import dataclasses

    from cudnn_port import cli_args, convert, targets
    from cudnn_port.formats import Derived

    onnx = formats.get("onnx")
    toy = Derived("int4", "_int4", ("onnx",), lambda src, dst: None, needs=("cudnn_port_absent_quantizer",))
    monkeypatch.setitem(formats.formats(), "onnx", dataclasses.replace(onnx, derived=onnx.derived + (toy,)))
    monkeypatch.setitem(targets.STYLES, "toy_style", targets.keras)
    args = cli_args.build_parser().parse_args(["convert", "a", "b", "--quantize", "int4", "--style", "toy_style"])
    assert (args.quantize, args.style) == ("int4", "toy_style")
    assert formats.derived_names() == ("int8", "int4")
    spec = make_spec("lstm", 2, True)
    src, _ = write_source(tmp_path, spec)
    with pytest.raises(CudnnPortError, match="convert needs cudnn_port_absent_quantizer, which is not installed"):
        convert(src, tmp_path / "out", quantize="int4", **spec_flags(spec))
    with pytest.raises(CudnnPortError, match="unknown quantization 'int2'; choose int8, int4"):
        convert(src, tmp_path / "out", quantize="int2", **spec_flags(spec))
    assert not (tmp_path / "out").exists()


def test_the_import_contract_keeps_apart_exactly_the_modules_that_declare_a_format():
    """pyproject.toml's ``formats-apart`` contract lists the format modules by hand (import-linter takes no
    pattern); the registry finds them by what they declare. A format module added without its line in the contract
    (or a line left behind by a removed one) fails here, not silently outside lint-imports' check."""
    import os

    try:
        import tomllib
    except ImportError:  # Python 3.10: import-linter's own TOML reader
        import tomli as tomllib
    from cudnn_port.discover import declaring
    from cudnn_port.formats import Format

    with open(os.path.join(os.path.dirname(__file__), os.pardir, "pyproject.toml"), "rb") as f:
        contracts = tomllib.load(f)["tool"]["importlinter"]["contracts"]
    listed = next(c for c in contracts if c["id"] == "formats-apart")["modules"]
    modules = declaring(formats.__name__, formats.__path__, "FORMAT", Format)
    assert sorted(listed) == sorted(modules), (sorted(listed), sorted(modules))
    assert len(modules) == len(formats.formats()) and len(listed) == len(set(listed))
