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


def test_ci_runs_readme_commands():
    """.ci/run must run README's test command, and the main job on the bundled model that README names."""
    readme = open(os.path.join(ROOT, "README.md")).read()
    ci = open(os.path.join(ROOT, ".ci", "run")).read()
    commands = re.findall(r"```bash\n(.*?)\n```", readme, flags=re.S)
    main_job = commands[0].split("pip install -e . && ")[1]
    assert main_job in ci, main_job
    assert "python -m pytest -q" in commands[1] and "python -m pytest -q" in ci
    assert os.path.exists(os.path.join(ROOT, "models", "char_lm", "model.keras"))
