"""Whole PyTorch programs (torch.export .pt2, tests/fixtures/torch/programs, made by make_torch_programs.py with
torch 2.13): each converts as one model, every whole-model artifact gives what the user's own nn.Module computes on
CPU at two lengths other than the exported one (1e-5 + 1e-4 * |PyTorch's value|), and verify's judge (PyTorch's
kernels run node by node from the archive) passes them and fails a wrong one."""
import os
import sys

import numpy as np
import pytest

from helpers import assert_clean_error, run_cli

HERE = os.path.dirname(__file__)
FIXTURES = os.path.join(HERE, "fixtures", "torch")
PROGRAMS = os.path.join(FIXTURES, "programs")
NAMES = ("char_lm", "attention_classifier", "seq2seq", "projected", "crnn")
LENGTHS = (4, 11)  # the archives were exported at 7 steps
ATOL, RTOL = 1e-5, 1e-4
_converted = {}


def programs():
    sys.path.insert(0, FIXTURES)
    try:
        import make_torch_programs
    finally:
        sys.path.remove(FIXTURES)
    return make_torch_programs


def pytorch_outputs(name, steps, seed=5):
    """(feeds by the program's input names, the user's nn.Module outputs) at ``steps`` steps, 3 rows."""
    torch = pytest.importorskip("torch")
    made = programs()
    args = made.example(name, batch=3, steps=steps, seed=seed)
    with torch.no_grad():
        want = made.build(name)(*args)
    want = [want] if isinstance(want, torch.Tensor) else list(want)
    names = {"seq2seq": ["src", "tgt"], "projected": ["x"], "crnn": ["x"]}.get(name, ["ids"])
    return dict(zip(names, [a.numpy() for a in args])), [w.numpy() for w in want]


def converted(name, tmp_path_factory):
    """OUT of ``convert`` of the program ``name`` (converted once per test session)."""
    if name not in _converted:
        from cudnn_port import convert

        out = tmp_path_factory.mktemp(name) / "out"
        _converted[name] = (out, convert(os.path.join(PROGRAMS, f"{name}.pt2"), out))
    return _converted[name]


def test_the_archives_hold_the_fixture_modules_weights():
    """The committed archives are what make_torch_programs.py exports: each parameter equals the seeded module's."""
    pytest.importorskip("torch")
    from cudnn_port.readers.torch_files import read_torch_file

    for name in NAMES:
        weights = read_torch_file(os.path.join(PROGRAMS, f"{name}.pt2")).root
        state = programs().build(name).state_dict()
        assert sorted(weights) == sorted(state), name
        for key, value in state.items():
            np.testing.assert_array_equal(weights[key], value.numpy(), err_msg=f"{name} {key}")


@pytest.mark.parametrize("name", NAMES)
def test_the_judge_computes_what_the_users_module_computes_at_other_lengths(name):
    """verify's judge, the graph run by torch.ops.aten from the archive, equals the nn.Module it was exported from
    at the exported length and at two others (its rule for other lengths is what every artifact is judged by)."""
    pytest.importorskip("torch")
    from cudnn_port.judging.torch_program import Interpreter

    judge = Interpreter(os.path.join(PROGRAMS, f"{name}.pt2"))
    assert judge.steps == 7
    for steps in (7,) + LENGTHS:
        feeds, want = pytorch_outputs(name, steps)
        got = judge.run(feeds, steps, 3)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape and np.allclose(g, w, atol=1e-6, rtol=1e-5), (name, steps)


def test_a_program_exported_with_a_fixed_batch_takes_any_batch_and_length():
    """tests/fixtures/torch/pt2/model.pt2 was exported with no dynamic dimension (ids [3, 7]): its translation takes
    ids [None, None], and at 4 rows and 11 steps computes what the judge computes from the archive (two readings of
    the graph that share no code)."""
    pytest.importorskip("torch")
    from cudnn_port.judging.torch_program import Interpreter
    from cudnn_port.readers.torch_program import translate

    path = os.path.join(FIXTURES, "pt2", "model.pt2")
    model = translate(path)
    assert [tuple(t.shape) for t in model.inputs] == [(None, None)]
    judge = Interpreter(path)
    assert (judge.steps, judge.batch) == (7, 3)
    ids = np.random.default_rng(0).integers(0, 10, size=(4, 11)).astype("int64")
    want = judge.run({"ids": ids}, 11, 4)
    got = np.asarray(model(ids))
    assert got.shape == want[0].shape == (4, 11, 4)
    np.testing.assert_allclose(got, want[0], atol=ATOL, rtol=RTOL)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_every_whole_model_artifact_matches_pytorch_at_two_other_lengths(name, tmp_path_factory):
    """convert model.pt2 writes the whole model, each recurrent node a fused stack (ONNX LSTM / GRU / RNN nodes,
    TFLite's fused LSTM / RNN), inputs named as the program names them, batch and time free; every artifact in every
    runtime gives the nn.Module's outputs at 4 and 11 steps (exported at 7). An LSTM with proj_size has no ONNX form
    (ONNX's LSTM has no projection): that model's ONNX is left out with a warning, as on the stack road."""
    pytest.importorskip("torch")
    from cudnn_port.formats.jobs import ModelJob
    from cudnn_port.judging.artifact_rows import model_artifact_rows

    out, manifest = converted(name, tmp_path_factory)
    arts = manifest.model_artifacts
    expected = {"saved_model", "graphdef", "tflite"} | (set() if name == "projected" else {"onnx"})
    assert expected <= set(arts), arts
    assert manifest.source.format == "PyTorch program (torch.export .pt2)"
    specs = {r["name"]: r for r in manifest["model_input_specs"]}
    assert list(specs) == list(pytorch_outputs(name, 4)[0]), specs  # the program's own input names
    assert all(r["shape"][:2] == [None, None] for r in specs.values()), specs  # batch and time free
    rows = []
    for steps in LENGTHS:
        feeds, want = pytorch_outputs(name, steps)
        job = ModelJob(None, [], str(out), None)
        job.manifest, job.input_names = manifest, list(feeds)
        rows += [dict(r, steps=steps) for r in model_artifact_rows(str(out), job, feeds, want, ATOL, RTOL, print)]
    ran = {r["artifact"] for r in rows if r["passed"] is not None}
    assert {"saved_model", "graphdef", "tflite (litert)"} <= ran, rows
    if name != "projected":
        assert "onnx (onnxruntime)" in ran, rows
    assert all(r["passed"] is not False for r in rows), [r for r in rows if r["passed"] is False]


@pytest.mark.slow
def test_verify_judges_a_program_by_pytorchs_kernels_and_fails_a_wrong_judge(capsys, tmp_path_factory, monkeypatch):
    """verify's rows of a converted .pt2 run every artifact at two lengths other than the exported one against
    PyTorch's kernels, and pass; the same rows fail when the judge's LSTM weights of one shape are 1% off (so
    they compare numbers, not shapes); without torch they fail, saying why."""
    pytest.importorskip("torch")
    from cudnn_port.judging import torch_program
    from cudnn_port.verify import source_unchanged

    out, _ = converted("char_lm", tmp_path_factory)
    code, report, err = run_cli(capsys, "verify", out)
    assert code == 0, report + err
    for steps in (11, 4):
        for artifact in ("saved_model", "graphdef", "onnx (onnxruntime)", "tflite (litert)"):
            assert f"{artifact} at {steps} steps" in report, report

    from cudnn_port.manifest import load_manifest

    manifest = load_manifest(str(out))
    assert source_unchanged(manifest)
    tensor = torch_program.Interpreter._tensor

    def planted(self, z, member, meta):
        value = tensor(self, z, member, meta)
        return value * 1.01 if list(value.shape) == [64, 16] else value  # lstm.weight_hh_l*: [4H, H]

    monkeypatch.setattr(torch_program.Interpreter, "_tensor", planted)
    rows = torch_program.program_rows(manifest, str(out), ATOL, RTOL, 0, True, lambda m: None)
    assert rows and all(r["passed"] is False for r in rows if r["passed"] is not None), rows
    monkeypatch.undo()
    monkeypatch.setitem(sys.modules, "torch", None)
    rows = torch_program.program_rows(manifest, str(out), ATOL, RTOL, 0, True, lambda m: None)
    assert len(rows) == 1 and rows[0]["unjudged"] and "not installed" in rows[0]["note"], rows  # not a pass:
    from cudnn_port.verify import _unjudged  # verify fails it unless the user accepts unjudged rows

    assert _unjudged(rows, allow=False) == 1 and rows[0]["passed"] is False


def test_an_op_without_translation_is_refused_in_one_line_naming_it_and_its_module(capsys, tmp_path):
    """A program with a Softplus (no translation): convert exits 2 with one line naming the ATen op and the module
    it came from, and writes nothing."""
    out = tmp_path / "out"
    code, _, err = run_cli(capsys, "convert", os.path.join(PROGRAMS, "unsupported.pt2"), out)
    assert_clean_error(code, err, "aten.softplus", "act (torch.nn.modules.activation.Softplus)")
    assert not out.exists()


@pytest.mark.slow
def test_convert_fails_a_translation_that_pytorch_computes_otherwise(tmp_path, monkeypatch):
    """convert's own parity adds PyTorch's kernels as a judge of a .pt2: with the stacks' buffers planted 1% off (the
    translated Keras model, and so its own judge, carry them), convert raises ParityError naming the rows at other
    lengths, and writes nothing."""
    pytest.importorskip("torch")
    from cudnn_port import convert
    from cudnn_port.errors import ParityError
    from cudnn_port.readers.pytorch import PyTorchSource

    get = PyTorchSource.get
    monkeypatch.setattr(PyTorchSource, "get", lambda self, name: get(self, name) * (
        1.01 if name.endswith("opaque_kernel") else 1))
    with pytest.raises(ParityError, match="onnx \\(onnxruntime\\) at 11 steps"):
        convert(os.path.join(PROGRAMS, "char_lm.pt2"), tmp_path / "out", formats=["onnx"])
    assert not (tmp_path / "out").exists()



@pytest.mark.slow
@pytest.mark.parametrize("name", ["time_major_gru", "given_states"])
def test_time_major_inputs_and_given_states_convert_and_match_pytorch(name, tmp_path, capsys):
    """A program whose recurrent input is time-major (batch_first=False) and one that takes (h0, c0) as inputs
    (programs/time_major_gru.pt2, given_states.pt2): convert names each input's dimensions by their roles ([time,
    batch, 6]; [layers, batch, 5]), so the ONNX's empty-batch guard pads and slices the batch, not the time, and
    every artifact gives the nn.Module's outputs at 4 and 11 steps on 5 rows (1e-5 + 1e-4 * |PyTorch's value|);
    verify passes."""
    torch = pytest.importorskip("torch")
    from cudnn_port import convert
    from cudnn_port.formats.jobs import ModelJob
    from cudnn_port.judging.artifact_rows import model_artifact_rows

    made = programs()
    module, names = made.build(name), ["x", "h0", "c0"][:len(made.example(name))]
    out = tmp_path / "out"
    manifest = convert(os.path.join(PROGRAMS, f"{name}.pt2"), out, formats=["saved_model", "onnx", "tflite"])
    axes = {r["name"]: r["axes"] for r in manifest["model_input_specs"]}
    assert axes["x"][:2] == ["time", "batch"] and all(axes[n][1] == "batch" for n in names), axes
    rows = []
    for steps in LENGTHS:
        args = made.example(name, batch=5, steps=steps, seed=steps)
        with torch.no_grad():
            want = module(*args)
        want = [w.numpy() for w in (want if isinstance(want, tuple) else (want,))]
        job = ModelJob(None, [], str(out), None)
        job.manifest, job.input_names = manifest, names
        rows += model_artifact_rows(str(out), job, dict(zip(names, [a.numpy() for a in args])), want, ATOL, RTOL,
                                    print)
    ran = {r["artifact"] for r in rows if r["passed"] is not None}
    assert {"saved_model", "onnx (onnxruntime)", "tflite (litert)"} <= ran, rows
    assert all(r["passed"] is not False for r in rows), [r for r in rows if r["passed"] is False]
    code, report, err = run_cli(capsys, "verify", out)
    assert code == 0, report + err
