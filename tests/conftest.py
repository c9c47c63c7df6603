"""Shared test helpers: seeded random stacks and batches, and the sample TF1 checkpoint writer."""
import hashlib
import itertools
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))

from cudnn_port.layout import RNNSpec, unpack  # noqa: E402

pytest_plugins = ["pytester"]

# fp32 parity bound from issue 2; measured max |error| for these sizes is ~2e-7.
ATOL_FP32 = 1e-5
INPUT, HIDDEN = 6, 5  # distinct on purpose: I != H catches transposed or swapped regions
CONFIGS = [(mode, layers, bi) for mode, layers, bi in itertools.product(("lstm", "gru"), (1, 2, 3), (False, True))]
CONFIG_IDS = [f"{m}-L{n}-{'bi' if b else 'uni'}" for m, n, b in CONFIGS]


def make_spec(mode, layers, bidirectional, dtype="float32", input_size=INPUT, hidden=HIDDEN):
    return RNNSpec(mode, layers, hidden, input_size, bidirectional, dtype)


def random_blob(spec, seed=0):
    """Distinct random values (N(0,1) * 0.3): constant weights would hide gate-order bugs."""
    return (np.random.default_rng(seed).normal(size=spec.param_count) * 0.3).astype(spec.dtype)


def random_canon(spec, seed=0):
    return unpack(spec, random_blob(spec, seed))


def ragged_batch(spec, batch=4, steps=7, seed=1):
    """x [B, T, I], lengths (full, 1 and in between), non-zero h_0 / c_0 [L*D, B, H]."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, steps, spec.input_size)).astype("float32")
    lengths = np.array([steps, 1, 4, steps - 1][:batch], dtype=np.int32)
    x[np.arange(steps)[None, :] >= lengths[:, None]] = 0.0
    shape = (spec.num_pseudo_layers, batch, spec.num_units)
    h_0 = (rng.normal(size=shape) * 0.5).astype("float32")
    c_0 = (rng.normal(size=shape) * 0.5).astype("float32")
    return x, lengths, h_0, c_0


def tree_hash(path):
    """sha256 over every file below ``path`` (names and bytes), to prove inputs are never modified."""
    h = hashlib.sha256()
    for root, dirs, files in sorted(os.walk(path)):
        dirs.sort()
        for f in sorted(files):
            full = os.path.join(root, f)
            h.update(os.path.relpath(full, path).encode())
            with open(full, "rb") as fh:
                h.update(fh.read())
    return h.hexdigest()


@pytest.fixture
def tf1_ckpt(tmp_path):
    """A TF1 Saver checkpoint holding the sample model; yields its prefix."""
    from make_tf1_checkpoint import sample_variables, save_tf1

    return save_tf1(str(tmp_path / "src" / "model.ckpt"), sample_variables(seed=3))


def torch_grads(spec, buffer, x, lengths, h0, c0, gy, ghn, gcn=None):
    """PyTorch's CPU kernels (nn.LSTM / GRU holding ``buffer``, packed ragged batch): ([outputs, h_n, c_n], [d
    buffer, dx, dh0, dc0]) for loss = sum(outputs * gy) + sum(h_n * ghn) [+ sum(c_n * gcn)]. Independent of
    cudnn_port's math: the judge of gradients."""
    import torch

    from cudnn_port.layout import pack
    from cudnn_port.targets import pytorch as torch_target

    cls = torch.nn.LSTM if spec.mode == "lstm" else torch.nn.GRU
    module = cls(spec.input_size, spec.num_units, spec.num_layers, batch_first=True, bidirectional=spec.bidirectional,
                 **({"proj_size": spec.num_proj} if spec.num_proj else {}))
    module.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in
                            torch_target.write(unpack(spec, buffer), "").items()})
    xt, h0t = torch.tensor(x, requires_grad=True), torch.tensor(h0, requires_grad=True)
    c0t = torch.tensor(c0, requires_grad=True) if spec.mode == "lstm" else None
    packed = torch.nn.utils.rnn.pack_padded_sequence(xt, torch.tensor(np.asarray(lengths).astype(np.int64)),
                                                     batch_first=True, enforce_sorted=False)
    out, final = module(packed, (h0t, c0t) if c0t is not None else h0t)
    y, _ = torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
    hn, cn = final if c0t is not None else (final, None)
    loss = (y * torch.tensor(gy)).sum() + (hn * torch.tensor(ghn)).sum()
    loss = loss + ((cn * torch.tensor(gcn)).sum() if cn is not None else 0)
    loss.backward()
    grads = {k: p.grad.numpy() for k, p in module.named_parameters()}
    forward = [t.detach().numpy() if t is not None else None for t in (y, hn, cn)]
    return forward, [pack(torch_target.read(grads, "", spec)), xt.grad.numpy(), h0t.grad.numpy(),
                     None if c0t is None else c0t.grad.numpy()]


def unpack_fixture(tmp_path_factory, archive, folder):
    """Extract a fixture tarball into a fresh temporary folder: (the folder ``folder`` in it, its expected.npz as a
    dict of arrays)."""
    import tarfile

    root = tmp_path_factory.mktemp(folder)
    with tarfile.open(archive) as opened:
        opened.extractall(root, filter="data")
    with np.load(root / folder / "expected.npz") as data:
        return root / folder, dict(data)
