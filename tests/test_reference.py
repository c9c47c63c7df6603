"""The NumPy reference is the judge, so it is itself checked against an independent implementation:
PyTorch's CPU nn.LSTM / nn.GRU (cuDNN-compatible math, reset-after GRU) on packed ragged batches."""
import numpy as np
import pytest

from helpers import ATOL_FP32, CONFIG_IDS, CONFIGS, make_spec, ragged_batch, random_canon
from cudnn_port import reference
from cudnn_port.formats.pytorch import torch_modules
from cudnn_port.targets import pytorch as torch_target

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("mode,layers,bi", CONFIGS, ids=CONFIG_IDS)
def test_reference_matches_pytorch_on_ragged_batches(mode, layers, bi):
    spec = make_spec(mode, layers, bi)
    canon = random_canon(spec, seed=layers + 10 * bi)
    x, lengths, h_0, c_0 = ragged_batch(spec)
    state = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in torch_target.write(canon, "").items()}
    want = torch_modules(spec, state, x, lengths, h_0, c_0)
    got = reference.forward(canon, x, lengths, h_0, c_0)
    for name, a, b in zip(("outputs", "h_n", "c_n"), got, want):
        if b is not None:
            np.testing.assert_allclose(a, b, atol=ATOL_FP32, rtol=0, err_msg=name)


def test_reference_zeroes_outputs_past_each_length():
    spec = make_spec("lstm", 2, True)
    x, lengths, h_0, c_0 = ragged_batch(spec)
    outputs, _, _ = reference.forward(random_canon(spec), x, lengths, h_0, c_0)
    for b, n in enumerate(lengths):
        assert np.all(outputs[b, n:] == 0) and np.all(np.abs(outputs[b, :n]).sum(-1) > 0)
