"""The benchmark and helper scripts under scripts/ are run by hand, never by the default tests: a klear-lab name
they import that moved (``SampleLogProbs`` left ``rl/rollout/hf.py``) broke one in silence. Each ``from klear_lab...
import name`` of theirs, at any depth, must resolve."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

SCRIPTS = sorted(Path(__file__).resolve().parents[3].glob("scripts/*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_klear_lab_name_a_script_imports_exists(script):
    tree = ast.parse(script.read_text(), filename=str(script))
    imports = [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
               and (node.module or "").split(".")[0] == "klear_lab"]
    for node in imports:
        module = importlib.import_module(node.module)
        missing = [a.name for a in node.names if not hasattr(module, a.name) and not (
                   hasattr(module, "__path__") and importlib.util.find_spec(f"{node.module}.{a.name}"))]
        assert not missing, f"{script.name}:{node.lineno}: {node.module} has no {', '.join(missing)}"


def test_the_scripts_are_found():
    assert len(SCRIPTS) >= 10
