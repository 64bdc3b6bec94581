"""The examples keep working: examples/torch_dlrm.py (a short run), and every `python` code block
of docs/python.md, run in order in one namespace (each may use what the blocks before it
defined), except a block right after the line `<!-- not run: ... -->` (one that needs mpirun)."""

import importlib.util
import pathlib
import re
import textwrap

import pytest

pytest.importorskip("torch")

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "torch_dlrm.py"
PYTHON_DOC = ROOT / "docs" / "python.md"

# A fenced python block, possibly indented (inside a list item), with the line before it.
_BLOCK = re.compile(r"^(?P<before>[^\n]*)\n(?P<indent>[ ]*)```python\n(?P<code>.*?)\n"
                    r"(?P=indent)```$", re.MULTILINE | re.DOTALL)


def test_torch_dlrm_runs(capsys):
    spec = importlib.util.spec_from_file_location("torch_dlrm", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    example.STEPS = 20
    example.main()
    output = capsys.readouterr().out
    assert "test loss" in output and "embedding step counter 20" in output


def python_blocks(text):
    """(line number, code) of each block of `text` to run."""
    blocks = []
    for match in _BLOCK.finditer(text):
        before = match.group("before").strip()
        if before.startswith("<!-- not run:"):
            continue
        line = text.count("\n", 0, match.start("code")) + 1
        blocks.append((line, textwrap.dedent(match.group("code"))))
    return blocks


def test_python_blocks_find_every_block():
    text = PYTHON_DOC.read_text()
    assert len(python_blocks(text)) == text.count("```python") - text.count("<!-- not run:")
    assert len(python_blocks(text)) >= 4


def test_python_doc_blocks_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the blocks write checkpoints and models to relative paths
    namespace = {"__name__": "python_md"}
    for line, code in python_blocks(PYTHON_DOC.read_text()):
        try:
            exec(compile(code, f"{PYTHON_DOC}:{line}", "exec"), namespace)
        except Exception as error:
            pytest.fail(f"docs/python.md, the block at line {line}: {type(error).__name__}: "
                        f"{error}")
    # The last block's results: served activations of the exporting layer's inputs.
    assert set(namespace["acts"]) == {"watched", "liked", "history", "user_id"}
    assert namespace["step"] == 4
