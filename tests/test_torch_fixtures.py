"""The PyTorch fixtures themselves (tests/fixtures/torch/, tests/fixtures/realworld/): every case in cases.json has
its arrays in the layout its spec says, packed outputs obey PyTorch's rules (zero past each length, the final state
is the output at the row's last step), the views file holds one storage, the crafted pickles call os.system and
were never run; and, where torch is installed, nn.LSTM / nn.GRU / nn.RNN rebuilt from each file's own tensors give
the recorded outputs again. The crafted files and whole pickled modules are never unpickled here."""
import json
import os
import pickletools
import zipfile

import numpy as np
import pytest

from helpers import ROOT

TORCH = os.path.join(ROOT, "tests", "fixtures", "torch")
REALWORLD = os.path.join(ROOT, "tests", "fixtures", "realworld")
SETS = {"torch": (TORCH, "cases.json", "expected.npz"),
        "realworld": (REALWORLD, "torch_cases.json", "torch_expected.npz")}


def load(which):
    folder, cases, arrays = SETS[which]
    with open(os.path.join(folder, cases)) as f:
        meta = json.load(f)
    return folder, meta, np.load(os.path.join(folder, arrays))


def all_cases():
    out = []
    for which in SETS:
        _, meta, _ = load(which)
        out += [pytest.param(which, i, id=f"{which}:{c['key']}") for i, c in enumerate(meta["cases"])]
    return out


@pytest.mark.parametrize("which,index", all_cases())
def test_arrays_match_the_spec_and_packing_rules(which, index):
    folder, meta, arrays = load(which)
    case = meta["cases"][index]
    assert os.path.isfile(os.path.join(folder, case["file"]))
    get = lambda name: arrays[f"{case['key']}/{name}"]
    lstm = case["mode"] == "lstm"
    dirs = 2 if case["bidirectional"] else 1
    out = case["proj_size"] or case["hidden_size"]
    x, lengths = get("x"), get("lengths")
    if not case["batch_first"]:  # everything below in [B, T, ...]
        x = x.transpose(1, 0, 2)
    batch, steps = x.shape[:2]
    assert x.shape[2] == case["input_size"] and lengths.dtype == np.int32 and len(lengths) == batch
    assert sorted(set(lengths.tolist())) != [steps], "lengths must be ragged"
    names = ["h0", "hn", "hn_full"] + (["c0", "cn", "cn_full"] if lstm else [])
    for name in names:
        width = case["hidden_size"] if name.startswith("c") else out
        assert get(name).shape == (case["num_layers"] * dirs, batch, width), name
    assert np.abs(get("h0")).min() > 0
    for name in ("y", "y_full"):
        y = get(name) if case["batch_first"] else get(name).transpose(1, 0, 2)
        assert y.shape == (batch, steps, dirs * out), name
    y = get("y") if case["batch_first"] else get("y").transpose(1, 0, 2)
    hn = get("hn")
    top = (case["num_layers"] - 1) * dirs
    for b, n in enumerate(lengths):
        assert not y[b, n:].any(), "packed outputs are zero past each length"
        if case["expected_from"] == "torch_cpu":  # cuDNN's own inputs (gpu_views) carry values past each length
            assert not x[b, n:].any()
        np.testing.assert_array_equal(y[b, n - 1, :out], hn[top, b])  # forward: the state at the row's length
        if dirs == 2:
            np.testing.assert_array_equal(y[b, 0, out:], hn[top + 1, b])  # backward: the state at step 0


def test_every_file_has_its_cases():
    for which in SETS:
        folder, meta, arrays = load(which)
        keys = {c["key"] for c in meta["cases"]}
        assert len(keys) == len(meta["cases"])
        assert {k.rsplit("/", 1)[0] for k in arrays.files} == keys
        for name, info in meta["files"].items():
            modules = info["modules"] if isinstance(info, dict) else None
            if modules is not None:
                assert sorted(modules) == sorted(c["module"] for c in meta["cases"] if c["file"] == name)


def test_views_of_one_cudnn_buffer():
    """gpu_views*.pt: one storage (cuDNN's weight space), tagged cpu / cuda:0, and cuDNN's own outputs."""
    for name, tag in (("gpu_views.pt", "cpu"), ("gpu_views_cuda.pt", "cuda:0")):
        with zipfile.ZipFile(os.path.join(TORCH, name)) as z:
            records = [n for n in z.namelist() if "/data/" in n and "/.data/" not in n]
            assert len(records) == 1 and z.getinfo(records[0]).file_size == 1080 * 4
            pkl = z.read([n for n in z.namelist() if n.endswith("/data.pkl")][0])
        tags = {a for op, a, _ in pickletools.genops(pkl) if isinstance(a, str) and a in ("cpu", "cuda:0")}
        assert tags == {tag}
    _, meta, arrays = load("torch")
    cudnn = np.load(os.path.join(ROOT, "tests", "fixtures", "cudnn", "cudnn_9.19_h100.npz"))
    for name in ("x", "h0", "c0", "y", "hn", "cn"):
        np.testing.assert_array_equal(arrays[f"gpu_views.pt/lstm/{name}"], cudnn[f"lstm_L2_bi/{name}"])


def pickle_globals(data):
    found, strings = [], []
    for op, arg, _ in pickletools.genops(data):
        if op.name == "GLOBAL":
            found.append(arg.replace(" ", "."))
        elif isinstance(arg, str):
            strings.append(arg)
        if op.name == "STACK_GLOBAL":
            found.append(".".join(strings[-2:]))
    return found


def test_crafted_pickles_call_os_system_and_never_ran():
    _, meta, _ = load("torch")
    assert {r["file"] for r in meta["refused"]} == {"evil.pt", "evil_legacy.pt"}
    with zipfile.ZipFile(os.path.join(TORCH, "evil.pt")) as z:
        assert "posix.system" in pickle_globals(z.read("evil/data.pkl"))
    with open(os.path.join(TORCH, "evil_legacy.pt"), "rb") as f:
        raw = f.read()
    import io

    stream, found = io.BytesIO(raw), []
    for _ in range(4):  # magic number, protocol, sys info, the object
        start = stream.tell()
        for _op in pickletools.genops(stream):
            pass
        found += pickle_globals(raw[start:stream.tell()])
    assert "posix.system" in found
    assert not os.path.exists(meta["refused"][0]["marker"])


# ------------------------------------------------------------------------------------------------ with torch installed
SAFE_KINDS = {"state_dict", "checkpoint_dict", "dataparallel", "compiled", "legacy", "gpu_views", "lightning",
              "legacy state_dict", "legacy checkpoint_dict", "torchscript", "safetensors", "export_pt2"}


def file_state_dict(torch, path, kind):
    if kind == "torchscript":
        return torch.jit.load(path, map_location="cpu").state_dict()
    if kind == "export_pt2":
        return torch.export.load(path).module().state_dict()
    if kind == "safetensors":
        from safetensors.torch import load_file

        return load_file(path)
    obj = torch.load(path, map_location="cpu", weights_only=True)
    for key in ("state_dict", "model_state_dict"):
        if isinstance(obj, dict) and isinstance(obj.get(key), dict):
            return obj[key]
    return obj


@pytest.mark.parametrize("which,index", all_cases())
def test_pytorch_gives_the_recorded_outputs_again(which, index):
    torch = pytest.importorskip("torch")
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    folder, meta, arrays = load(which)
    case = meta["cases"][index]
    if case["kind"] not in SAFE_KINDS:
        pytest.skip(f"{case['kind']}: read only through the restricted reader")
    if case["kind"] == "lightning" and which == "realworld":
        pytest.skip("its hyper_parameters hold pyannote objects: weights_only refuses it")
    if case["kind"] == "export_pt2" and not hasattr(getattr(torch, "export", None), "load"):
        pytest.skip(f"torch {torch.__version__} has no torch.export.load (2.1 and later)")
    state = file_state_dict(torch, os.path.join(folder, case["file"]), case["kind"])
    kw = dict(num_layers=case["num_layers"], bias=case["bias"], batch_first=case["batch_first"],
              bidirectional=case["bidirectional"])
    mode = case["mode"]
    if mode == "lstm":
        module = torch.nn.LSTM(case["input_size"], case["hidden_size"], proj_size=case["proj_size"], **kw)
    elif mode == "gru":
        module = torch.nn.GRU(case["input_size"], case["hidden_size"], **kw)
    else:
        module = torch.nn.RNN(case["input_size"], case["hidden_size"], nonlinearity=mode[4:], **kw)
    double = case["dtype"] == "float64"
    module.load_state_dict({n: state[k].float() for n, k in case["tensors"].items()})
    if double:
        module = module.double()
        module.load_state_dict({n: state[k] for n, k in case["tensors"].items()})
    get = lambda name: torch.from_numpy(arrays[f"{case['key']}/{name}"])
    cast = (lambda t: t.double()) if double else (lambda t: t)
    hx = (cast(get("h0")), cast(get("c0"))) if mode == "lstm" else cast(get("h0"))
    x = cast(get("x"))
    with torch.no_grad():
        packed = pack_padded_sequence(x, get("lengths").long(), batch_first=case["batch_first"], enforce_sorted=False)
        out, state_n = module.eval()(packed, hx)
        y, _ = pad_packed_sequence(out, batch_first=case["batch_first"], total_length=x.shape[int(case["batch_first"])])
        y_full, _ = module(x, hx)
    hn = state_n[0] if mode == "lstm" else state_n
    atol = 1e-5 if case["expected_from"] != "torch_cpu" else 1e-6
    for name, value in (("y", y), ("hn", hn), ("y_full", y_full)):
        np.testing.assert_allclose(value.float().numpy(), get(name).numpy(), atol=atol, rtol=1e-5, err_msg=name)
