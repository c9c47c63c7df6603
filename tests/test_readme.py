"""README's library example runs as written (from the repository root, as a reader would run it)."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_readme_python_example_runs(monkeypatch):
    text = open(os.path.join(ROOT, "README.md")).read()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "README has no python example"
    monkeypatch.chdir(ROOT)
    namespace = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)
    assert namespace["y"].shape == (2, 5, 96) and namespace["h_n"].shape == (4, 2, 48)
    assert namespace["manifest"]["stacks"][0]["spec"]["num_units"] == 48
