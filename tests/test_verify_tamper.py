"""verify sees everything it vouches for: each tampering of a converted OUT makes it exit 1 and names the artifact.

Every tampering below changes one thing by a little (weights moved by N(0, 1e-3), about what a wrong signature copy
moved outputs by when this was found) and then rewrites manifest.json's sha256 so that the hashes still match: the
artifact's judge must catch it. Two more tamperings leave the hashes stale, one adds a file: the hash check must
catch those.
"""
import json
import os
import shutil

import numpy as np
import pytest

from helpers import ROOT, random_blob, tagger
from cudnn_port import cli, deps
from cudnn_port.layout import unpack
from cudnn_port.outdir import MANIFEST
from cudnn_port.paths import sha256

tf = pytest.importorskip("tensorflow")
pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.slow  # every artifact of the sample written once, then verified per tampering


def rehash(out):
    """Rewrite manifest.json's sha256 of every file: a tamperer who knows the format."""
    path = os.path.join(out, MANIFEST)
    manifest = json.load(open(path))
    manifest["files"] = {rel: sha256(os.path.join(out, rel)) for rel in manifest["files"]
                         if os.path.exists(os.path.join(out, rel))}
    json.dump(manifest, open(path, "w"), indent=2)
    return manifest


def verify_fails(out, capsys, expected, *flags):
    """``verify OUT`` exits 1 and fails exactly the rows named in ``expected``, no more, no fewer."""
    code = cli.main(["verify", str(out), "--json", "--quiet", *flags])
    report = json.loads(capsys.readouterr().out)
    failed = {r["artifact"] for r in report["rows"] if r["passed"] is False}
    assert code == 1 and not report["passed"], failed
    assert failed == set(expected), (sorted(failed), sorted(expected))
    return report


def runtimes(row, openvino="openvino"):
    """A row name per runtime ONNX runs in here: onnxruntime, and OpenVINO where it is installed."""
    return {f"{row} (onnxruntime)"} | ({f"{row} ({openvino})"} if deps.available("openvino") else set())


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """The bundled TF1 sample converted to every per-stack format, int8 included, once."""
    from cudnn_port import convert

    out = tmp_path_factory.mktemp("converted") / "out"
    manifest = convert(os.path.join(ROOT, "models", "tf1_bilstm", "model.ckpt"), out,
                       formats=["checkpoint", "pytorch", "saved_model", "graphdef", "onnx"], quantize="int8")
    return out, manifest


@pytest.fixture
def out(tmp_path, converted):
    path = tmp_path / "out"
    shutil.copytree(converted[0], path)
    return path


def moved(manifest, seed=99):
    """The stack's canonical weights moved by N(0, 1e-3)."""
    from cudnn_port.layout import RNNSpec
    from cudnn_port.readers import open_source

    spec = RNNSpec(**manifest["stacks"][0]["spec"])
    blob = open_source(manifest["source"]["checkpoint"]).get(manifest["stacks"][0]["variable"])
    return unpack(spec, blob + (random_blob(spec, seed) / 0.3 * 1e-3).astype(blob.dtype))


def _source_canon(manifest):
    from cudnn_port.layout import RNNSpec
    from cudnn_port.readers import open_source

    spec = RNNSpec(**manifest["stacks"][0]["spec"])
    return unpack(spec, open_source(manifest["source"]["checkpoint"]).get(manifest["stacks"][0]["variable"]))


@pytest.fixture(scope="module")
def modules(converted):
    """The stack's SavedModel module (build_module) with the moved weights and with the source's, built and traced
    once: (bad, fine). Each test saves its own mix of their functions into its own copy of OUT."""
    from cudnn_port.exports.tensorflow import build_module

    manifest = converted[1]
    return build_module(moved(manifest)), build_module(_source_canon(manifest))


def test_untampered_output_passes(converted, capsys):
    assert cli.main(["verify", str(converted[0]), "--quiet"]) == 0


@pytest.mark.parametrize("signature", ["serving_default", "with_initial_state"])
def test_weights_of_one_signature(out, modules, capsys, signature):
    bad, fine = modules
    functions = {"serving_default": (bad if signature == "serving_default" else fine).serve,
                 "with_initial_state": (bad if signature == "with_initial_state" else fine).serve_state}
    module = tf.Module()
    module.serve, module.serve_state = functions["serving_default"], functions["with_initial_state"]
    shutil.rmtree(out / "saved_model")  # the module's own functions are the bad ones too
    tf.saved_model.save(module, str(out / "saved_model"), signatures=functions)
    rehash(out)
    states = {"serving_default": "no states", "with_initial_state": "states fed"}[signature]
    verify_fails(out, capsys, {f"saved_model (signatures), {states}", f"saved_model (functions), {states}"})


@pytest.mark.parametrize("function", ["serve", "serve_state"])
def test_weights_of_one_saved_model_function(out, modules, capsys, function):
    """``tf.saved_model.load(p).serve(...)`` runs the module's own functions, which hold their own copy of the graph:
    tampering with one while the signatures stay right must fail too."""
    bad, fine = modules
    module = tf.Module()
    module.serve = (bad if function == "serve" else fine).serve
    module.serve_state = (bad if function == "serve_state" else fine).serve_state
    shutil.rmtree(out / "saved_model")
    tf.saved_model.save(module, str(out / "saved_model"), signatures={
        "serving_default": fine.serve, "with_initial_state": fine.serve_state})
    rehash(out)
    verify_fails(out, capsys, {{"serve": "saved_model (functions), no states",
                                "serve_state": "saved_model (functions), states fed"}[function]})


@pytest.mark.parametrize("kind,key,path", [("graphdef", "graphdef", "frozen_graph.pb"), ("onnx", "onnx", "model.onnx"),
                                           ("onnx", "onnx_stateful", "model_stateful.onnx"),
                                           ("pytorch", "pytorch", "pytorch/cudnn_lstm.safetensors")])
def test_weights_of_one_artifact(out, converted, capsys, kind, key, path):
    from cudnn_port import formats
    from cudnn_port.formats.jobs import StackJob

    os.remove(out / path)
    canon = moved(converted[1])
    formats.get(kind).write(StackJob(canon.spec, canon, "rnn"), {key: str(out / path)})
    rehash(out)
    verify_fails(out, capsys, runtimes(key) if kind == "onnx" else
                 {"pytorch (.safetensors)"} if kind == "pytorch" else
                 {"graphdef (session), states fed", "graphdef (session), no states"})


@pytest.mark.parametrize("states,path,row", [(False, "model_int8.onnx", "onnx int8"),
                                             (True, "model_stateful_int8.onnx", "onnx_stateful int8")])
def test_int8_model_with_other_weights(out, converted, capsys, states, path, row):
    from cudnn_port.exports.onnx import write_onnx
    from cudnn_port.exports.quantize import quantize_onnx

    write_onnx(moved(converted[1], seed=5), str(out / "other.onnx"), states=states)
    quantize_onnx(out / "other.onnx", out / path)
    os.remove(out / "other.onnx")
    rehash(out)
    verify_fails(out, capsys, {f"{row} (onnxruntime)"})


def rewrite_checkpoint(out, change):
    from cudnn_port.checkpoint import Checkpoint, write_checkpoint

    ckpt = Checkpoint(out / "checkpoint")
    items = [(n, change(n, ckpt.get(n)), ckpt.dtypes[n]) for n in ckpt.names]
    shutil.rmtree(out / "checkpoint")
    write_checkpoint(str(out / "checkpoint"), items)


def test_a_converted_tensor_in_the_checkpoint(out, converted, capsys):
    target = converted[1]["stacks"][0]["targets"][0]
    rewrite_checkpoint(out, lambda n, v: v + np.float32(1e-3) if n == target else v)
    rehash(out)
    verify_fails(out, capsys, {"checkpoint (tf1 style)"})


def test_a_copied_variable_in_the_checkpoint(out, capsys):
    rewrite_checkpoint(out, lambda n, v: v + np.float32(1e-3) if n == "dense/kernel" else v)
    rehash(out)
    verify_fails(out, capsys, {"checkpoint (copied variables)"})


@pytest.mark.parametrize("edit,failed", [
    (lambda m: m["stacks"][0]["spec"].update(num_units=47), {"manifest spec"}),
    (lambda m: m["stacks"][0]["spec"].update(input_size=31), {"manifest spec"}),
    (lambda m: m.update(style="pytorch"), {"checkpoint (pytorch style)"}),
    (lambda m: m["stacks"][0]["artifacts"].update(onnx="model_int8.onnx"), runtimes("onnx")),
], ids=["units", "input", "style", "artifact"])
def test_the_manifest(out, capsys, edit, failed):
    manifest = json.load(open(out / MANIFEST))
    edit(manifest)
    json.dump(manifest, open(out / MANIFEST, "w"))
    verify_fails(out, capsys, failed)


def test_stale_hashes_extra_and_missing_files(out, capsys):
    with open(out / "model.onnx", "ab") as f:
        f.write(b"\0")  # a byte appended: the hash fails, and the artifact check refuses to run it
    verify_fails(out, capsys, {"files (sha256)"} | runtimes("onnx"))
    rehash(out)  # the damaged model.onnx now hashes as recorded: its rows still fail
    (out / "notes.txt").write_text("added")
    verify_fails(out, capsys, {"files (sha256)"} | runtimes("onnx"))
    os.remove(out / "notes.txt")
    os.remove(out / "frozen_graph.pb")
    verify_fails(out, capsys, {"files (sha256)", "graphdef (session), states fed", "graphdef (session), no states"} |
                 runtimes("onnx"))


# --------------------------------------------------------------------------------------------- a whole model
@pytest.fixture(scope="module")
def other(tmp_path_factory):
    """The tagger with every weight moved by N(0, 1e-3), exported whole once: its out folder."""
    import cudnn_port

    model = tagger()
    model.set_weights([w + np.random.default_rng(1).normal(size=w.shape).astype(w.dtype) * 1e-3
                       if w.dtype.kind == "f" else w for w in model.get_weights()])
    out = tmp_path_factory.mktemp("other") / "out"
    cudnn_port.export(model, out)
    return out


@pytest.mark.parametrize("path", ["saved_model", "frozen_graph.pb", "model.onnx"])
def test_whole_model_artifact_from_another_model(tmp_path, tagger_out, other, capsys, path):
    """The tagger's export (tagger_out) with one artifact replaced by the same artifact of the same architecture
    with other weights (and the hashes redone)."""
    out = tmp_path / "out"
    shutil.copytree(tagger_out[0], out)
    target = out / path
    shutil.rmtree(target) if target.is_dir() else os.remove(target)
    (shutil.copytree if (other / path).is_dir() else shutil.copy)(other / path, target)
    rehash(out)
    verify_fails(out, capsys, {"frozen_graph.pb": {"graphdef"},
                               "model.onnx": runtimes("onnx", "openvino f32")}.get(path, {path}))


def test_a_layout_read_otherwise_than_cudnns_api_fails_the_layout_row(out, capsys, monkeypatch):
    """verify's reference reads each buffer through the cuDNN API's statement of the layout (judging/cudnn_api.py);
    where the converter's layout (layout.unpack, which every writer reads by) reads it otherwise (here: gates i and f
    of the first pseudo-layer swapped), the layout row fails, and only it: the artifacts were written right."""
    import importlib

    stack_case = importlib.import_module("cudnn_port.judging.stack_case")  # where verify reads each stack's buffer
    real = stack_case.unpack

    def swapped(spec, buffer):
        canon = real(spec, buffer)
        W = canon.layers[0].W
        W[[0, 1]] = W[[1, 0]]
        return canon

    monkeypatch.setattr(stack_case, "unpack", swapped)
    verify_fails(out, capsys, {"layout (two statements of cuDNN's)"})


def test_a_layout_offset_shared_by_every_writer_fails_every_row_of_a_fused_model(tmp_path, capsys, monkeypatch):
    """The layout every writer and the fused layers' own CPU path read buffers by (``RNNSpec.blocks``) gives the
    first two pseudo-layers each other's input bias, during export and verify. Every artifact is then wrong in the
    same way, so only judges that read the buffer otherwise can see it: the per-stack reference (the cuDNN API's
    layout) and the whole-model judge (each fused layer by that reference). export refuses it, and verify of what
    it kept fails every row but the files' and the copied variables' (the Embedding's and Dense's, as they were)."""
    import dataclasses

    import cudnn_port
    from cudnn_port.layout import RNNSpec

    real = RNNSpec.blocks

    def shifted(self):
        blocks = real(self)
        i, j = [k for k, b in enumerate(blocks) if b.kind == "b_W"][:2] if self.num_pseudo_layers > 1 else (0, 0)
        blocks[i], blocks[j] = (dataclasses.replace(blocks[i], pseudo=blocks[j].pseudo),
                                dataclasses.replace(blocks[j], pseudo=blocks[i].pseudo))
        return blocks

    monkeypatch.setattr(RNNSpec, "blocks", shifted)
    with pytest.raises(cudnn_port.ParityError):  # export's own check runs the whole-model judge too
        cudnn_port.export(tagger(stacks=(("encoder", "lstm", 2, True),)), tmp_path / "out", keep_failed=True)
    code = cli.main(["verify", str(tmp_path / "out"), "--json", "--quiet"])
    report = json.loads(capsys.readouterr().out)
    judged = [r for r in report["rows"] if r["passed"] is not None and r["artifact"] not in
              ("files (sha256)", "checkpoint (copied variables)")]  # as written: the source's bytes
    assert code == 1 and judged and all(r["passed"] is False for r in judged), \
        [r["artifact"] for r in judged if r["passed"]]
    assert any(r["stack"] == "(whole model)" for r in judged)
    assert any(r["artifact"].startswith("layout") for r in judged)


# ------------------------------------------------------------------------- a SavedModel whose original cannot judge
def shifted_blocks(real):
    """``RNNSpec.blocks`` with the first two pseudo-layers' input biases swapped: a layout error every writer shares
    (the rewrite's CPU function and model.onnx agree with each other and are both wrong)."""
    import dataclasses

    def shifted(self):
        blocks = real(self)
        i, j = [k for k, b in enumerate(blocks) if b.kind == "b_W"][:2]
        blocks[i], blocks[j] = (dataclasses.replace(blocks[i], pseudo=blocks[j].pseudo),
                                dataclasses.replace(blocks[j], pseudo=blocks[i].pseudo))
        return blocks

    return shifted


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_a_saved_model_whose_original_cannot_judge_never_passes(tmp_path, capsys, monkeypatch, mode):
    """A SavedModel calling a cuDNN op (2 layers, both directions, input 6 != hidden 5, random weights) converted
    with the writers' layout shifted: OUT/saved_model and model.onnx are wrong alike. With the source moved out of
    reach, the original cannot judge and the conversion must not judge itself: both rows fail (exit 1), and
    --allow-unjudged says "PASSED (2 rows not judged)", never plain PASSED. Moved next to OUT (found by its sha256)
    or named with --source, the original judges again and fails both."""
    from helpers import make_spec, random_blob, save_raw_op_model

    from cudnn_port import convert
    from cudnn_port.layout import RNNSpec

    spec = make_spec(mode, 2, True)
    source = save_raw_op_model(tmp_path / "src", spec, random_blob(spec, seed=41))
    out = tmp_path / "work" / "out"
    with monkeypatch.context() as patch:
        patch.setattr(RNNSpec, "blocks", shifted_blocks(RNNSpec.blocks))
        convert(source, out)
    both = {"saved_model [serving_default]", "onnx (onnxruntime)"}
    shutil.move(source, tmp_path / "away")  # not next to OUT (tmp_path / "work")
    report = verify_fails(out, capsys, both)
    assert all("not judged" in r["note"] for r in report["rows"] if r["artifact"] in both), report["rows"]
    assert cli.main(["verify", str(out), "--quiet", "--allow-unjudged"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == "PASSED (2 rows not judged)"
    report = verify_fails(out, capsys, both, "--source", str(tmp_path / "away"))
    assert all(r["judge"].startswith("the original") for r in report["rows"] if r["artifact"] in both)
    shutil.move(tmp_path / "away", tmp_path / "work" / "kept")
    report = verify_fails(out, capsys, both, "--allow-unjudged")  # found: judged, nothing left unjudged
    assert report["not_judged"] == 0 and "found next to OUT" in report["rows"][1]["note"], report["rows"][1]


def test_a_saved_model_alone_with_its_source_moved_is_no_pass(tmp_path, capsys):
    """``--formats saved_model`` with the source gone: no artifact is judged, so verify fails the SavedModel's row
    rather than printing PASSED with no numeric row; a --source that is not the source is refused in one line."""
    from helpers import make_spec, random_blob, save_raw_op_model

    from cudnn_port import convert

    spec = make_spec("gru", 2, True)
    source = save_raw_op_model(tmp_path / "src", spec, random_blob(spec, seed=43))
    convert(source, tmp_path / "work" / "out", formats=["saved_model"])
    shutil.move(source, tmp_path / "away")
    verify_fails(tmp_path / "work" / "out", capsys, {"saved_model [serving_default]"})
    code = cli.main(["verify", str(tmp_path / "work" / "out"), "--source", str(tmp_path / "work"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--source" in err and "differs" in err, err


def test_a_float16_cast_in_the_onnx_does_not_loosen_its_tolerance(tmp_path, capsys, monkeypatch):
    """The graph road's ONNX writer (planted) adds 9e-4 to every output and a float16 Cast whose output nothing
    reads. The source computes in float32, so the row keeps the user's tolerance (1e-5 + 1e-4 |judge|) and fails;
    float16's (2e-3) is granted only where the source's own graph computes in float16."""
    import onnx
    from onnx import helper, numpy_helper

    from helpers import make_spec, random_blob, save_raw_op_model

    from cudnn_port import convert
    from cudnn_port.formats import onnx as onnx_format

    real = onnx_format.write_signature_onnx

    def with_cast(selected, path, signature):
        part = real(selected, path, signature)
        model = onnx.load(path)
        graph = model.graph
        for k, output in enumerate(graph.output):
            for node in graph.node:
                node.output[:] = [f"{o}_pre" if o == output.name else o for o in node.output]
            graph.initializer.append(numpy_helper.from_array(np.float32(9e-4), f"shift_{k}"))
            graph.node.append(helper.make_node("Add", [f"{output.name}_pre", f"shift_{k}"], [output.name]))
            graph.node.append(helper.make_node("Cast", [f"{output.name}_pre"], [f"unread_{k}"],
                                               to=onnx.TensorProto.FLOAT16))
        onnx.save(model, path)
        return part

    spec = make_spec("lstm", 2, True)
    source = save_raw_op_model(tmp_path / "src", spec, random_blob(spec, seed=47))
    monkeypatch.setattr(onnx_format, "write_signature_onnx", with_cast)
    convert(source, tmp_path / "out")
    report = verify_fails(tmp_path / "out", capsys, {"onnx (onnxruntime)"})
    row = next(r for r in report["rows"] if r["artifact"] == "onnx (onnxruntime)")
    assert 8e-4 < row["max_abs"] < 1e-3 and "float16" not in row["note"], row


def test_an_exploding_stack_grants_no_absolute_floor_its_relative_tolerance_covers(tmp_path, monkeypatch):
    """A ReLU SimpleRNN whose recurrent weights grow its outputs to about 8e5 over verify's 9 steps: fp32 errs by
    8e-2 on the large elements, which rtol covers; the fp32 floor used to grant all of it as atol (0.34) to every
    element, exact zeros included. The stack's ONNX writer (planted) adds 1e-2 to every output: both ONNX files'
    rows of the stack fail, and nothing else does."""
    import keras

    import cudnn_port
    from cudnn_port.exports import onnx as onnx_export

    real = onnx_export.write_onnx

    def shifted(canon, path, **kwargs):
        import onnx
        from onnx import helper, numpy_helper

        real(canon, path, **kwargs)
        model = onnx.load(path)
        graph = model.graph
        for node in graph.node:
            node.output[:] = ["outputs_pre" if o == "outputs" else o for o in node.output]
        graph.initializer.append(numpy_helper.from_array(np.float32(1e-2), "shift"))
        graph.node.append(helper.make_node("Add", ["outputs_pre", "shift"], ["outputs"]))
        onnx.save(model, path)

    layers = keras.layers
    keras.utils.set_random_seed(3)
    x = keras.Input((None, 3))
    rnn = layers.SimpleRNN(5, activation="relu", return_sequences=True)
    model = keras.Model(x, layers.Dense(2)(rnn(x)))
    kernel, recurrent, bias = rnn.get_weights()
    rng = np.random.default_rng(0)
    rnn.set_weights([rng.normal(size=kernel.shape).astype("float32"),
                     (np.eye(5) * 6 + rng.normal(size=recurrent.shape) * 0.3).astype("float32"), bias])
    monkeypatch.setattr(onnx_export, "write_onnx", shifted)
    cudnn_port.export(model, tmp_path / "out", formats=["onnx"])
    monkeypatch.undo()
    report = cudnn_port.verify(tmp_path / "out")
    failed = {(r["stack"], r["artifact"]) for r in report["rows"] if r["passed"] is False}
    stack = next(r["stack"] for r in report["rows"] if r["artifact"].startswith("checkpoint (keras"))
    assert failed == {(stack, row) for row in runtimes("onnx") | runtimes("onnx_stateful")}, failed
    big = max(r["max_abs"] for r in report["rows"] if r["stack"] == stack and r["passed"])
    assert big > 1e-2, big  # the correct artifacts' fp32 error on the large elements, passed by rtol


def test_flags_a_neighbour_contradicts_are_warned_about_and_fail_the_layout_row(tmp_path, capsys):
    """A TF1 buffer of a 2-layer unidirectional LSTM (input 8, hidden 8: 1152 elements, the size of a 1-layer
    BiLSTM of the same widths too) beside ``dense_out/kernel [8, 11]``, converted with the wrong
    ``--num-layers 1 --bidirectional``: every artifact agrees with the wrong spec, but the next layer takes 8
    features, not 16. convert warns in one line; verify fails the layout row, and only it."""
    from helpers import make_spec, run_cli, write_source

    spec = make_spec("lstm", 2, False, input_size=8, hidden=8)
    prefix, _ = write_source(tmp_path, spec, extra={
        "dense_out/kernel": np.random.default_rng(2).normal(size=(8, 11)).astype("float32")})
    widths = ["--mode", "lstm", "--num-units", "8", "--input-size", "8"]
    code, _, err = run_cli(capsys, "convert", prefix, tmp_path / "out", *widths, "--num-layers", "1",
                           "--bidirectional", "--formats", "checkpoint,onnx")
    warned = [line for line in err.splitlines() if "dense_out/kernel" in line]
    assert code == 0 and len(warned) == 1 and "takes 8 features" in warned[0] and "not the 16" in warned[0], err
    verify_fails(tmp_path / "out", capsys, {"layout (spec against the tensors beside it)"})
    code, _, err = run_cli(capsys, "convert", prefix, tmp_path / "right", *widths, "--num-layers", "2",
                           "--formats", "onnx")
    assert code == 0 and "dense_out" not in err, err
    assert cli.main(["verify", str(tmp_path / "right"), "--quiet"]) == 0
