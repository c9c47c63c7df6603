"""The fused layers record which library's layout their fused op trained the buffer in (cudnn_platform), and a
buffer recorded as ROCm / MIOpen is refused with one line instead of being converted as if it were cuDNN's. No
ROCm build is at hand: the build info TensorFlow reports is patched, and the fused op (GPU only) is stood in for by
the layer's CPU path, which computes the same function of the same buffer."""
import os
from unittest import mock

import numpy as np
import pytest

from helpers import assert_clean_error, make_spec, random_blob, run_cli

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")


def trained_model(rocm, path):
    """A model whose fused layers took one training step through the fused-op path on a CUDA or ROCm build."""
    from cudnn_port import layer_paths, layers, tf_graph

    spec = make_spec("lstm", 2, True)
    inputs = keras.Input((None, spec.input_size))
    model = keras.Model(inputs, layers.CudnnLSTM(spec.num_units, num_layers=2, bidirectional=True,
                                                 name="encoder")(inputs))
    model.layers[1].opaque_kernel.assign(random_blob(spec))
    build = dict(tf.sysconfig.get_build_info(), is_rocm_build=rocm, is_cuda_build=not rocm)
    fused = mock.patch.object(tf_graph, "cudnn_forward", lambda spec, params, *args, **kw: tf_graph.stack_forward(
        tf_graph.unpack_tensor(spec, params), *args))
    with fused, mock.patch.object(tf.sysconfig, "get_build_info", lambda: build), layer_paths.forced_path("cudnn"):
        model(np.ones((2, 3, spec.input_size), "float32"), training=True)
    model.save(path)
    return model


@pytest.mark.slow
@pytest.mark.parametrize("rocm", [False, True], ids=["cuda", "rocm"])
def test_the_platform_is_recorded_and_a_miopen_buffer_is_refused(tmp_path, capsys, rocm):
    path = str(tmp_path / "model.keras")
    model = trained_model(rocm, path)
    assert int(model.layers[1].cudnn_platform.numpy()) == (2 if rocm else 1)
    ckpt = tf.train.Checkpoint(encoder=model.layers[1]).write(str(tmp_path / "ckpt" / "model"))
    for source in (path, ckpt):
        code, _, err = run_cli(capsys, "convert", source, tmp_path / "out", "--force")
        if rocm:
            assert_clean_error(code, err, "ROCm build", "MIOpen's layout", "not cuDNN's")
            assert not (tmp_path / "out").exists()
        else:
            assert code == 0, err


def test_a_file_saved_before_the_record_existed_loads_as_unrecorded(tmp_path):
    """Two variables per fused layer (opaque_kernel, cudnn_spec) as older files hold: the layer loads, its buffer
    intact, its platform 0 (unrecorded: cuDNN's layout assumed)."""
    from cudnn_port.readers.keras_model import load_keras_file

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    model = load_keras_file(os.path.join(root, "models", "char_lm", "model.keras"))
    fused = [layer for layer in model.layers if hasattr(layer, "cudnn_platform")]
    assert fused and all(int(layer.cudnn_platform.numpy()) == 0 for layer in fused)
    assert all(float(np.abs(layer.opaque_kernel.numpy()).max()) > 0 for layer in fused)
