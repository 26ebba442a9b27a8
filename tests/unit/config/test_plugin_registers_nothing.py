"""A plugin that registers no component is warned about, naming it: its ``@REGISTRY.register`` decorator missing
(a typo) was found only as "unknown component" later. A plugin that registers, directly or through a helper it
imports, is not warned about, nor one imported again in the same process (listed again, or edited)."""

from __future__ import annotations

import textwrap
import warnings
from pathlib import Path

import pytest

from klear_lab import plugins
from klear_lab.plugins import load_plugins
from klear_lab.registry import DATA_MIX, REGISTRIES

pytestmark = pytest.mark.usefixtures("registries_restored")
SAID = "registered no component"


def mix(name: str, registered: bool = True, tail: str = "") -> str:
    """A data-mix plugin registering ``name``; with ``registered=False``, the same class without its decorator."""
    decorator = f'@DATA_MIX.register("{name}")\n' if registered else ""
    return textwrap.dedent('''
        from dataclasses import dataclass
        from klear_lab.registry import DATA_MIX

        {decorator}@dataclass(frozen=True)
        class Mix:
            """Test plugin."""
            limit: int = 3

            def __call__(self, pools, ranks, seed):
                return [r for recs in pools.values() for r in recs]
    ''').replace("{decorator}", decorator) + tail


def warned(*plugin_lists: list[Path | str]) -> list[str]:
    """The no-component warnings loading each list of plugins in turn said."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for listed in plugin_lists:
            load_plugins([str(p) for p in listed], origin="e.yaml")
    return [str(w.message) for w in caught if SAID in str(w.message)]


def test_a_plugin_file_registering_nothing_is_warned_about_naming_it(tmp_path):
    typo = tmp_path / "forgot_decorator.py"
    typo.write_text(mix("never_registered_mix", registered=False))
    (message,) = warned([typo])
    assert message.startswith(f"e.yaml: plugin '{typo}' registered no component (no source, data_mix, ")
    assert all(axis in message for axis in REGISTRIES) and "clip" in message and "reward" in message
    assert '`@REGISTRY.register("name")` decorator may be missing' in message
    assert warned([typo]) == []  # listed again: it is not imported again, nor warned about again
    from klear_lab.errors import ConfigError
    from klear_lab.registry import CLIP

    with pytest.raises(ConfigError, match=r"needs its file under `plugins:` and its "
                       r"`@CLIP.register\('never_registered_mix'\)` decorator \(`from klear_lab.registry "
                       r"import CLIP`\)"):
        CLIP.get("never_registered_mix")  # the name it meant to register: the error says what else it needs


def test_a_plugin_registering_a_component_or_a_function_is_not_warned_about(tmp_path):
    (tmp_path / "one_mix.py").write_text(mix("warn_one_mix"))
    (tmp_path / "fn_reward.py").write_text(textwrap.dedent('''
        from dataclasses import dataclass
        from klear_lab.registry import REWARD

        @dataclass(frozen=True)
        class NoParams:
            pass

        @REWARD.register("warn_fn_reward", params=NoParams)
        def reward(params, completions, records):
            raise NotImplementedError
    '''))
    assert warned([tmp_path / "one_mix.py", tmp_path / "fn_reward.py"]) == []
    assert "warn_one_mix" in DATA_MIX.names()


def test_a_plugin_imported_again_is_not_warned_about(tmp_path):
    """Listed by another layer (not imported again), and edited without touching what it registers (imported
    again: its entries existed already, and were replaced by the new version's)."""
    path = tmp_path / "again.py"
    path.write_text(mix("warn_again_mix"))
    assert warned([path], [path]) == []
    first = DATA_MIX.get("warn_again_mix")
    path.write_text(mix("warn_again_mix", tail="# an edit\n"))
    assert warned([path]) == [] and DATA_MIX.get("warn_again_mix") is not first


def test_an_edit_that_drops_the_decorator_is_warned_about(tmp_path):
    path = tmp_path / "dropped.py"
    path.write_text(mix("warn_dropped_mix"))
    assert warned([path]) == []
    path.write_text(mix("warn_dropped_mix", registered=False))
    assert len(warned([path])) == 1 and "warn_dropped_mix" not in DATA_MIX.names()


def test_a_plugin_whose_helper_registers_is_not_warned_about(tmp_path):
    """Also when another plugin imported the helper first (it is not run again: nothing new registers), and
    through a helper's own helper."""
    (tmp_path / "warn_helper_mixes.py").write_text(mix("warn_helper_mix"))
    (tmp_path / "warn_outer.py").write_text("import warn_helper_mixes\n")
    for name, code in (("first", "import warn_helper_mixes\n"), ("second", "from warn_helper_mixes import Mix\n"),
                       ("third", "import warn_outer\n")):
        (tmp_path / f"{name}.py").write_text(code)
    assert warned([tmp_path / "first.py"], [tmp_path / "second.py"], [tmp_path / "third.py"]) == []
    (tmp_path / "fourth.py").write_text("import json\nimport warn_outer\nfrom klear_lab.registry import CLIP\n")
    (tmp_path / "fifth.py").write_text("import json\nfrom klear_lab.registry import CLIP\n")
    assert warned([tmp_path / "fourth.py"]) == [] and len(warned([tmp_path / "fifth.py"])) == 1


def test_a_module_plugin_registering_nothing_is_warned_about(tmp_path, monkeypatch):
    (tmp_path / "warn_module_none.py").write_text(mix("warn_module_none_mix", registered=False))
    (tmp_path / "warn_module_mix.py").write_text(mix("warn_module_mix"))
    monkeypatch.syspath_prepend(str(tmp_path))
    (message,) = warned(["warn_module_none", "warn_module_mix"])
    assert message.startswith(f"e.yaml: plugin 'warn_module_none' {SAID}")
    assert warned(["warn_module_none", "warn_module_mix"]) == []  # imported already


def test_an_entry_point_registering_nothing_is_warned_about(tmp_path, monkeypatch):
    site = tmp_path / "site"
    (site / "klear_ext_empty").mkdir(parents=True)
    (site / "klear_ext_empty" / "__init__.py").write_text(mix("warn_entry_point_mix", registered=False))
    dist = site / "klear_ext_empty-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: klear-ext-empty\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[klear_lab.plugins]\nempty = klear_ext_empty\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(plugins, "_loaded_entry_points", False)
    with pytest.warns(UserWarning, match=rf"^entry point 'empty' \(klear_ext_empty\) in group klear_lab.plugins "
                                         rf"{SAID}"):
        plugins.load_entry_point_plugins()


def test_a_plugin_registering_a_built_in_under_another_name_is_not_warned_about_when_edited(tmp_path):
    """An alias of a built-in (``CLIP.register("alias")(CLIP.get("ppo"))``), edited and imported again in a
    notebook, was warned about: the entry held the same class, and built-in classes did not count (a red team)."""
    alias = tmp_path / "alias_clip.py"
    text = 'from klear_lab.registry import CLIP\nCLIP.register("warn_ppo_alias")(CLIP.get("ppo"))\n'
    alias.write_text(text)
    assert warned([alias]) == []
    alias.write_text(text + "# edited\n")
    assert warned([alias]) == []
