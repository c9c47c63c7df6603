"""TorchScript files as users save them (``torch.jit.trace(model, example).save(path)``, ``torch.jit.script``),
built here with the running torch (TorchScript's serialized code differs across versions): a trace of Embedding ->
2-layer bidirectional batch_first LSTM -> Linear, of a GRU classifier taking the last step, and of an LSTM given
non-zero states whose h_n is used converts whole; every whole-model artifact gives what the original nn.Module computes
on CPU at 4 and 11 steps (traced at 7, 2 rows; judged at 3) within 1e-5 + 1e-4 * |PyTorch's value|. The code is read as
data: a file whose code calls anything else is refused, nothing of it run; a scripted model with a loop is refused
whole in one line naming the construct and the file inside the zip, its stacks still converting; a trace that baked a
size is refused whole, saying so."""
import os
import zipfile

import numpy as np
import pytest

from helpers import run_cli

torch = pytest.importorskip("torch")
nn = torch.nn
ATOL, RTOL = 1e-5, 1e-4
LENGTHS = (4, 11)  # traced at 7
H, I, VOCAB = 6, 5, 10  # hidden != input


class CharLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, I)
        self.lstm = nn.LSTM(I, H, 2, batch_first=True, bidirectional=True)
        self.out = nn.Linear(2 * H, 4)

    def forward(self, ids):
        y, _ = self.lstm(self.emb(ids))
        return self.out(y)


class GRUClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(I, H, 2, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(2 * H, 3)

    def forward(self, x):
        y, _ = self.gru(x)
        return torch.softmax(self.fc(y[:, -1]), -1)


class LastState(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(I, H, 2, batch_first=True)
        self.fc = nn.Linear(H, 3)

    def forward(self, x, h0, c0):
        y, (h, c) = self.lstm(x, (h0, c0))
        return self.fc(torch.tanh(h[-1])), c


class Loop(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(I, H, 1, batch_first=True)
        self.fc = nn.Linear(H, 3)

    def forward(self, x):
        y, _ = self.lstm(x)
        total = y[:, 0]
        for t in range(1, y.size(1)):
            total = total + y[:, t]
        return self.fc(total)


class Baked(CharLM):
    def forward(self, ids):
        y, _ = self.lstm(self.emb(ids))
        return self.out(y).reshape(-1, int(ids.size(1)) * 4)  # int(): the trace writes the length as a number


MODELS = {"char_lm": CharLM, "gru_classifier": GRUClassifier, "last_state": LastState}


def inputs(name, steps, batch, seed=0):
    g = torch.Generator().manual_seed(seed)
    if name in ("char_lm", "baked"):
        return [torch.randint(0, VOCAB, (batch, steps), generator=g)]
    x = [torch.randn(batch, steps, I, generator=g)]
    return x + ([torch.randn(2, batch, H, generator=g) for _ in range(2)] if name == "last_state" else [])


def saved(name, folder, script=False):
    """(the nn.Module, the TorchScript file of it saved as users save it)."""
    torch.manual_seed(3)
    model = {**MODELS, "loop": Loop, "baked": Baked}[name]().eval()
    path = os.path.join(folder, f"{name}.pt")
    (torch.jit.script(model) if script else torch.jit.trace(model, tuple(inputs(name, 7, 2)))).save(path)
    return model, path


def original(model, name, steps, batch=3):
    """(feeds by the forward's argument names, what the nn.Module computes on them)."""
    args = inputs(name, steps, batch, seed=steps)
    with torch.no_grad():
        want = model(*args)
    want = list(want) if isinstance(want, tuple) else [want]
    names = {"char_lm": ["ids"], "last_state": ["x", "h0", "c0"]}.get(name, ["x"])
    return dict(zip(names, [a.numpy() for a in args])), [w.numpy() for w in want]


@pytest.mark.parametrize("name", MODELS)
def test_a_trace_reads_as_the_modules_program(name, tmp_path):
    """The code read as data, run by verify's judge (torch.ops.aten node by node) and by the translated Keras model,
    computes what the nn.Module computes at two lengths and a batch other than the traced ones."""
    from cudnn_port.judging.torch_program import Interpreter
    from cudnn_port.readers.torch_program import translate

    model, path = saved(name, str(tmp_path))
    judge, keras_model = Interpreter(path), translate(path)
    assert [t.name for t in keras_model.inputs] == list(original(model, name, 4)[0])
    for steps in LENGTHS:
        feeds, want = original(model, name, steps)
        got = judge.run(feeds, steps, 3)
        translated = keras_model([feeds[t.name] for t in keras_model.inputs])
        translated = translated if isinstance(translated, (list, tuple)) else [translated]
        assert len(got) == len(want) == len(translated)
        for w, g, t in zip(want, got, translated):
            np.testing.assert_allclose(g, w, atol=1e-6, rtol=1e-5, err_msg=f"judge {name} {steps}")
            np.testing.assert_allclose(np.asarray(t), w, atol=ATOL, rtol=RTOL, err_msg=f"keras {name} {steps}")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["char_lm", "gru_classifier"])
def test_every_whole_model_artifact_of_a_trace_matches_pytorch(name, tmp_path):
    """convert writes every whole-model artifact of the trace, inputs named as forward names them; each one, in
    every runtime, gives the nn.Module's outputs at 4 and 11 steps and 3 rows. (last_state is judged above, not
    converted here: convert's own parity also runs the translated Keras model on inputs it draws batch-first, which
    a state input [layers, batch, hidden] is not, so that conversion fails its parity, as the same .pt2's does.)"""
    from cudnn_port import convert
    from cudnn_port.formats.jobs import ModelJob
    from cudnn_port.judging.artifact_rows import model_artifact_rows

    model, path = saved(name, str(tmp_path))
    out = tmp_path / "out"
    manifest = convert(path, out)
    assert manifest.source.format == "PyTorch program (TorchScript)"
    assert {"saved_model", "graphdef", "tflite", "onnx"} <= set(manifest.model_artifacts), manifest.model_artifacts
    rows = []
    for steps in LENGTHS:
        feeds, want = original(model, name, steps)
        job = ModelJob(None, [], str(out), None)
        job.manifest, job.input_names = manifest, list(feeds)
        rows += model_artifact_rows(str(out), job, feeds, want, ATOL, RTOL, print)
    ran = {r["artifact"] for r in rows if r["passed"] is not None}
    assert {"saved_model", "graphdef", "tflite (litert)", "onnx (onnxruntime)"} <= ran, rows
    assert all(r["passed"] is not False for r in rows), [r for r in rows if r["passed"] is False]


@pytest.mark.slow
def test_verify_judges_a_trace_by_pytorchs_kernels_and_fails_a_wrong_judge(capsys, tmp_path, monkeypatch):
    """verify runs every artifact of a converted trace at two lengths other than 7 against PyTorch's kernels on
    the parsed graph, and passes; with the judge's weights 1% off the same rows fail (they compare numbers)."""
    from cudnn_port.judging import torch_program
    from cudnn_port.manifest import load_manifest

    _, path = saved("char_lm", str(tmp_path))
    out = tmp_path / "out"
    code, _, err = run_cli(capsys, "convert", path, out, "--formats", "onnx")
    assert code == 0, err
    code, report, err = run_cli(capsys, "verify", out)
    assert code == 0, report + err
    assert "onnx (onnxruntime) at 11 steps" in report and "onnx (onnxruntime) at 4 steps" in report, report
    read = torch_program.read_script
    monkeypatch.setattr(torch_program, "read_script",
                        lambda p: (lambda g, w: (g, {k: v * 1.01 for k, v in w.items()}))(*read(p)))
    rows = torch_program.program_rows(load_manifest(str(out)), str(out), ATOL, RTOL, 0, True, lambda m: None)
    assert rows and all(r["passed"] is False for r in rows if r["passed"] is not None), rows


@pytest.mark.slow
def test_a_scripted_loop_is_refused_whole_in_one_line_and_its_stacks_convert(capsys, tmp_path):
    """torch.jit.script of a model with a for loop: convert names the loop and the file inside the zip in one
    line, then converts the LSTM stack, which verify passes."""
    _, path = saved("loop", str(tmp_path), script=True)
    out = tmp_path / "out"
    code, _, err = run_cli(capsys, "convert", path, out)
    assert code == 0, err
    lines = [line for line in err.splitlines() if "whole model not converted" in line]
    assert len(lines) == 1 and "a for loop" in lines[0] and "code/__torch__/" in lines[0], err
    from cudnn_port.manifest import load_manifest

    manifest = load_manifest(str(out))
    assert [s.variable for s in manifest.stacks] == ["lstm/opaque_kernel"] and not manifest.model_artifacts
    code, report, err = run_cli(capsys, "verify", out)
    assert code == 0, report + err


def test_the_code_is_read_as_data_never_run(tmp_path):
    """A trace whose code was edited to call os.system is refused naming the call; the command never ran."""
    from cudnn_port.readers.torchscript import read_script
    from cudnn_port.readers.torchscript_ops import NotStraight

    _, path = saved("char_lm", str(tmp_path))
    marker = tmp_path / "ran"
    crafted = tmp_path / "crafted.pt"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(crafted, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if "/code/" in info.filename and info.filename.endswith(".py"):  # the root's, by any mangled name
                data = data.replace(b"    out = self.out\n",
                                    f"    out = self.out\n    _9 = __import__('os').system('touch {marker}')\n"
                                    .encode())
            dst.writestr(info, data)
    patched = [n for n in zipfile.ZipFile(crafted).namelist() if b"__import__" in zipfile.ZipFile(crafted).read(n)]
    assert len(patched) == 1, patched
    with pytest.raises(NotStraight, match="a call of __import__"):
        read_script(str(crafted))
    assert not marker.exists()


def test_code_that_does_not_parse_leaves_the_stacks(tmp_path):
    """A trace whose code file was damaged (not Python) is refused whole naming the file; nothing else is read of
    the code, and the stack reader still reads the LSTM from data.pkl."""
    from cudnn_port.readers.pytorch import PyTorchSource
    from cudnn_port.readers.torchscript import read_script
    from cudnn_port.readers.torchscript_ops import NotStraight

    _, path = saved("char_lm", str(tmp_path))
    damaged = tmp_path / "damaged.pt"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(damaged, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info, data.replace(b"def forward", b"def forward((") if info.filename.endswith(".py") and
                         b"class CharLM" in data else data)
    with pytest.raises(NotStraight, match=r"code/__torch__/.*\.py does not parse .*SyntaxError"):
        read_script(str(damaged))
    assert list(PyTorchSource(str(damaged)).specs) == ["lstm/opaque_kernel"]


def test_a_trace_that_baked_a_size_is_refused_whole_saying_so(tmp_path):
    """A trace that wrote the example's length as a number (reshape to [-1, 7 * 4]) takes no other length: the whole
    model is refused naming the node and the baked size, before anything is built."""
    from cudnn_port.readers.torchscript import read_script
    from cudnn_port.readers.torchscript_ops import NotStraight

    with pytest.warns(torch.jit.TracerWarning):
        _, path = saved("baked", str(tmp_path))
    with pytest.raises(NotStraight, match="aten.reshape .* baked in"):
        read_script(path)


def test_torchscript_files_are_claimed_by_their_own_kind(tmp_path):
    from cudnn_port.readers import source_kind

    _, path = saved("gru_classifier", str(tmp_path))
    assert source_kind(path) == "torchscript"


@pytest.mark.parametrize("name", MODELS)
def test_a_scripted_recurrent_model_is_refused_whole_naming_the_branch(name, tmp_path):
    """torch.jit.script writes nn.LSTM's / nn.GRU's forward (and F.embedding) with ifs on the input: the reader
    names the first one and the file inside the zip, and reads nothing further."""
    from cudnn_port.readers.torchscript import read_script
    from cudnn_port.readers.torchscript_ops import NotStraight

    _, path = saved(name, str(tmp_path), script=True)
    with pytest.raises(NotStraight, match=r"code/__torch__/torch/nn/.*\.py:\d+ holds an if;"):
        read_script(path)


class ReluRNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.RNN(I, H, 2, nonlinearity="relu", batch_first=True)
        self.fc = nn.Linear(H, 3)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.fc(y)


def test_the_spec_flags_settle_a_scripted_files_stacks_and_are_refused_for_a_whole_model(capsys, tmp_path):
    """A scripted nn.RNN (its forward branches, so its stacks convert) takes --mode as any PyTorch file's stacks do,
    judged by PyTorch's outputs in verify; a trace, which converts whole and states every spec, refuses --mode in one
    line, nothing written."""
    torch.manual_seed(5)
    path = str(tmp_path / "relu.pt")
    torch.jit.script(ReluRNN().eval()).save(path)
    out = tmp_path / "out"
    code, _, err = run_cli(capsys, "convert", path, out, "--mode", "rnn_relu", "--formats", "onnx")
    assert code == 0, err
    code, report, err = run_cli(capsys, "verify", out)
    assert code == 0, report + err
    _, traced = saved("gru_classifier", str(tmp_path))
    code, _, err = run_cli(capsys, "convert", traced, tmp_path / "whole", "--mode", "gru")
    assert code == 2 and "--mode" in err and "leave the spec flags out" in err and len(err.strip().splitlines()) == 1
    assert not os.path.exists(tmp_path / "whole")
