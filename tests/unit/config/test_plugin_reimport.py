"""A plugin file edited in the same process (a notebook) and loaded again: the registries hold what the file
registers now, as a fresh process would; an unchanged file is not imported again, a failed edit keeps the last."""

from __future__ import annotations

import sys

import pytest

from klear_lab.errors import ConfigError
from klear_lab.plugins import FILE_MODULE_PREFIX, load_plugins
from klear_lab.registry import CLIP


@pytest.fixture(autouse=True)
def registries_as_they_were():
    """These plugins' clips raise when called: left registered, they would stop a later test in this worker
    from asking every registered clip its statistics (``sweep.metrics.clip_metric_names``)."""
    from klear_lab.registry import REGISTRIES

    for registry in REGISTRIES.values():
        registry.load_builtins()  # before the snapshot: restoring it must not drop them
    before = {axis: registry.snapshot() for axis, registry in REGISTRIES.items()}
    modules = set(sys.modules)
    yield
    for axis, entries in before.items():
        REGISTRIES[axis].restore(entries)
    for name in set(sys.modules) - modules:
        if name.startswith(FILE_MODULE_PREFIX):
            del sys.modules[name]


def clip(name: str, eps: float = 0.2, tail: str = "") -> str:
    """A clip plugin registering ``name`` with default ``eps``."""
    return f'''
from dataclasses import dataclass
from klear_lab.registry import CLIP

@CLIP.register("{name}")
@dataclass(frozen=True)
class Clip:
    """Test plugin."""
    eps: float = {eps}
    def __call__(self, logp, old_logp, adv, mask):
        raise NotImplementedError
{tail}'''


def versions_loaded(path) -> list[str]:
    """The modules of ``path``'s versions in ``sys.modules``."""
    return [m for m, mod in list(sys.modules.items())
            if m.startswith(FILE_MODULE_PREFIX) and getattr(mod, "__file__", None) == str(path.resolve())]


def test_a_renamed_component_no_longer_resolves_after_the_edit(tmp_path):
    """The old name stayed registered to the old class for the rest of the process."""
    path = tmp_path / "renamed.py"
    path.write_text(clip("reimport_foo_clip"))
    load_plugins([str(path)])
    assert CLIP.get("reimport_foo_clip").eps == 0.2
    path.write_text(clip("reimport_bar_clip"))
    load_plugins([str(path)])
    assert CLIP.get("reimport_bar_clip").__module__ in versions_loaded(path)
    with pytest.raises(ConfigError, match="unknown clip 'reimport_foo_clip'"):
        CLIP.get("reimport_foo_clip")
    assert "reimport_foo_clip" not in CLIP.names() and len(versions_loaded(path)) == 1
    path.write_text(clip("reimport_foo_clip"))  # undone: the first version's name again, the second's gone
    load_plugins([str(path)])
    assert "reimport_foo_clip" in CLIP.names() and "reimport_bar_clip" not in CLIP.names()


def test_a_changed_default_is_the_new_classes(tmp_path):
    path = tmp_path / "default.py"
    path.write_text(clip("reimport_eps_clip", eps=0.2))
    load_plugins([str(path)])
    path.write_text(clip("reimport_eps_clip", eps=0.3))
    load_plugins([str(path)])
    assert CLIP.params("reimport_eps_clip") == {"eps": 0.3}
    assert versions_loaded(path) == [CLIP.get("reimport_eps_clip").__module__]


def test_an_unchanged_file_listed_twice_is_imported_once(tmp_path):
    path = tmp_path / "same.py"
    path.write_text(clip("reimport_same_clip"))
    load_plugins([str(path), str(path)])
    first = CLIP.get("reimport_same_clip")
    load_plugins([str(path)], origin="another config")
    assert CLIP.get("reimport_same_clip") is first and len(versions_loaded(path)) == 1


BROKEN = {"raises": clip("reimport_new_clip", tail="raise RuntimeError('boom')\n"), "builtin_name": clip("gppo")}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_an_edit_that_fails_keeps_the_last_version(tmp_path, case):
    """A failing edit (an exception; a built-in's name, refused) registers nothing and forgets nothing."""
    path = tmp_path / f"kept_{case}.py"
    path.write_text(clip(f"reimport_kept_{case}"))  # one name per case: the other case's file holds one too
    load_plugins([str(path)])
    kept = CLIP.get(f"reimport_kept_{case}")
    path.write_text(BROKEN[case])
    with pytest.raises(ConfigError, match=f"plugin '{path}'"):
        load_plugins([str(path)])
    assert CLIP.get(f"reimport_kept_{case}") is kept and versions_loaded(path) == [kept.__module__]
    assert "reimport_new_clip" not in CLIP.names() and CLIP.get("gppo").__module__.startswith("klear_lab.")
