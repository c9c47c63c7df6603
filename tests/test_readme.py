"""README's examples run as written, and CI runs README's two commands."""
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = open(os.path.join(ROOT, "README.md")).read()


@pytest.mark.slow  # the examples convert the bundled models with every export
def test_every_python_example_runs(tmp_path, monkeypatch):
    """Each ```python block, in order, from a folder where the repository's models/ and examples/ are where the
    README expects them (its out/ folders land in the temporary folder)."""
    for name in ("models", "examples"):
        os.symlink(os.path.join(ROOT, name), tmp_path / name)
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    assert len(blocks) >= 3, "README lost its runnable examples"
    for i, block in enumerate(blocks):
        namespace = {}
        exec(compile(block, f"README.md python block {i + 1}", "exec"), namespace)
        if "canon" in namespace:  # the library example
            assert namespace["y"].shape == (2, 5, 96) and namespace["h_n"].shape == (4, 2, 48)
            assert namespace["manifest"]["stacks"][0]["spec"]["num_units"] == 48


def test_ci_runs_readme_commands():
    """.ci/run must run README's test command and the main job on the bundled model, installed as README says."""
    ci = open(os.path.join(ROOT, ".ci", "run")).read()
    commands = re.findall(r"```bash\n(.*?)\n```", README, flags=re.S)
    setup, main_job = re.match(r"(.*pip install [^&]*) && (.*)", commands[0]).groups()
    assert main_job in ci, main_job
    assert re.search(r"pip install -c constraints\.txt", setup) and "-c constraints.txt" in ci
    assert "python -m pytest -q" in commands[1] and "python -m pytest -q" in ci
    assert os.path.exists(os.path.join(ROOT, "models", "char_lm", "model.keras"))
