"""pytest plugin: run cudnn-port's parity checks in your own test suite.

    import pytest

    @pytest.mark.parity("exports/encoder", atol=1e-5)
    def test_encoder_export(parity_report):
        assert parity_report["passed"], parity_report["rows"]

The ``parity`` marker names a convert output folder (and optional atol / rtol / seed / batch / steps);
the ``parity_report`` fixture is :func:`cudnn_port.verify.verify`'s report for it.
"""
import pytest


def pytest_configure(config: "pytest.Config") -> None:
    config.addinivalue_line("markers", "parity(out, atol=1e-5, rtol=1e-4): cudnn-port parity checks of a convert "
                                       "output folder, reported by the parity_report fixture")


@pytest.fixture
def parity_report(request: "pytest.FixtureRequest") -> dict:
    marker = request.node.get_closest_marker("parity")
    if marker is None or not marker.args:
        pytest.fail("parity_report needs @pytest.mark.parity(OUT) naming a cudnn-port convert output folder")
    # lazy: pytest loads this plugin in every run; cudnn_port loads only for a test that asks
    from cudnn_port.verify import verify

    return verify(*marker.args, **marker.kwargs)
