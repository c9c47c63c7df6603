"""README's commands and examples run as written, CI runs README's two commands, and the docs' links resolve."""
import os
import re
import shlex
import subprocess
import sys

import pytest

from helpers import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = open(os.path.join(ROOT, "README.md")).read()
CI = open(os.path.join(ROOT, ".ci", "run")).read()
BASH_BLOCKS = re.findall(r"```bash\n(.*?)\n```", README, flags=re.S)
# pages other branches write; README links them already


def _in_repository_layout(tmp_path, monkeypatch):
    """Work in tmp_path with the repository's models/, examples/ and tests/ where README's paths expect them, so
    README's out/ folders land in the temporary folder."""
    for name in ("models", "examples", "tests"):
        os.symlink(os.path.join(ROOT, name), tmp_path / name)
    monkeypatch.chdir(tmp_path)


@pytest.mark.slow  # the examples convert the bundled models with every export
def test_every_python_example_runs(tmp_path, monkeypatch):
    """Each ```python block, in order."""
    _in_repository_layout(tmp_path, monkeypatch)
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    assert len(blocks) >= 3, "README lost its runnable examples"
    for i, block in enumerate(blocks):
        namespace = {}
        exec(compile(block, f"README.md python block {i + 1}", "exec"), namespace)
        if "canon" in namespace:  # the library example
            assert namespace["y"].shape == (2, 5, 96) and namespace["h_n"].shape == (4, 2, 48)
            assert namespace["manifest"]["stacks"][0]["spec"]["num_units"] == 48


def _block_with(*words):
    found = [b for b in BASH_BLOCKS if all(w in b for w in words)]
    assert found, f"README has no bash block with {words}"
    return found[0]


def test_ci_runs_readme_commands():
    """.ci/run must run README's test command and the main job on the bundled model, installed as README says."""
    setup, main_job = re.match(r"(.*pip install [^&]*) && (.*)", _block_with("models/char_lm/model.keras",
                                                                               "pip install -c")).groups()
    assert main_job in CI, main_job
    assert re.search(r"pip install -c constraints\.txt", setup) and "-c constraints.txt" in CI
    assert "python -m pytest -q" in _block_with("pip install -c", "pytest") and "python -m pytest -q" in CI
    assert os.path.exists(os.path.join(ROOT, "models", "char_lm", "model.keras"))


def test_readme_stays_a_front_page():
    """README is at most 16.5 KB (16,896 bytes): detail lives in docs/, which README links."""
    size = os.path.getsize(os.path.join(ROOT, "README.md"))
    assert size <= 16_896, f"README.md is {size} bytes, over 16,896: move detail to docs/"


@pytest.mark.slow  # each command a conversion
def test_quick_start_commands_run(tmp_path, monkeypatch):
    """Every line of README's other bash blocks: a `pip install` names extras pyproject.toml declares; a command
    .ci/run runs verbatim is left to CI; every other command runs here, from the repository's layout, and exits 0."""
    _in_repository_layout(tmp_path, monkeypatch)
    extras = set(re.findall(r"^(\w+) = \[", open(os.path.join(ROOT, "pyproject.toml")).read(), flags=re.M))
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    ran = 0
    for block in BASH_BLOCKS:
        if "python3 -m venv" in block:  # the two opening commands: test_ci_runs_readme_commands
            continue
        for line in (line.strip() for line in block.splitlines()):
            if not line or line.startswith("#") or line in CI:
                continue
            if line.startswith("pip install "):
                wanted = re.search(r'"cudnn-port(?:\[([\w,]+)\])?"|cudnn-port$', line)
                assert wanted and set((wanted.group(1) or "").split(",")) - {""} <= extras, line
                continue
            for command in line.split(" && "):  # cudnn-port in this process (CI runs the installed script)
                run = cli(*shlex.split(command)[1:]) if command.startswith("cudnn-port ") else \
                    subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True)
                assert run.returncode == 0, f"{command}\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}"
            ran += 1
    assert ran >= 3, "README lost its quick start"


def _bench_flags(script):
    return set(re.findall(r'add_argument\("(--[\w-]+)"', open(os.path.join(ROOT, script)).read())) | {"--help"}


@pytest.mark.parametrize("page", ["README.md"] + sorted(f"docs/{p}" for p in os.listdir(os.path.join(ROOT, "docs"))))
def test_bench_commands_and_links_resolve(page):
    """Every `python bench/X.py ...` a page quotes names a script that declares its flags; every relative link
    points at a file that exists, and an anchor at one of its headings."""
    text = open(os.path.join(ROOT, page)).read()
    for script, args in re.findall(r"python (bench/\w+\.py)([^`\n]*)", text):
        assert os.path.exists(os.path.join(ROOT, script)), script
        assert set(re.findall(r"--[\w-]+", args)) <= _bench_flags(script), (page, script, args)
    prose = re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", text, flags=re.S))
    for target, anchor in re.findall(r"\]\(([^)#:\s]*)(?:#([^)\s]+))?\)", prose):
        path = os.path.normpath(os.path.join(os.path.dirname(page), target)) if target else page
        assert os.path.exists(os.path.join(ROOT, path)), (page, target)
        if anchor:
            headings = re.findall(r"^#+ (.*)$", open(os.path.join(ROOT, path)).read(), flags=re.M)
            slugs = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}
            assert anchor in slugs, (page, target, anchor)
