"""Registries, duplicate names, and both plugin routes (config list; installed entry point)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from klear_lab import plugins
from klear_lab.cli import main
from klear_lab.config.compose import compose
from klear_lab.errors import ConfigError
from klear_lab.registry import CLIP, REGISTRIES, Registry


def test_every_component_builds_from_defaults():
    for axis, registry in REGISTRIES.items():
        assert registry.names(), axis
        for name in registry.names():
            obj = registry.build({"name": name})
            assert dataclasses.is_dataclass(obj) and obj.__dataclass_params__.frozen, (axis, name)


def test_duplicate_name_is_an_error():
    reg = Registry("demo", None, "demo")

    @reg.register("x")
    @dataclasses.dataclass(frozen=True)
    class A:
        pass

    with pytest.raises(KeyError, match="already registered"):
        @reg.register("x")
        @dataclasses.dataclass(frozen=True)
        class B:
            pass


def test_unfrozen_dataclass_rejected():
    reg = Registry("demo", None, "demo")
    with pytest.raises(TypeError, match="frozen"):
        @reg.register("y")
        @dataclasses.dataclass
        class C:
            pass


def test_unknown_name_lists_registered():
    with pytest.raises(ConfigError) as err:
        CLIP.get("gpo")
    assert "gppo" in str(err.value) and "did you mean" in str(err.value)


PLUGIN = textwrap.dedent('''
    from dataclasses import dataclass
    from klear_lab.registry import DATA_MIX

    @DATA_MIX.register("{name}")
    @dataclass(frozen=True)
    class FirstOnly:
        """Keep only the first source's records (test plugin)."""
        limit: int = 3

        def __call__(self, pools, ranks, seed):
            first = sorted(pools)[0]
            return pools[first][: self.limit]
''')


def test_plugin_file_from_config(tmp_path):
    (tmp_path / "my_mix.py").write_text(PLUGIN.format(name="plugin_file_mix"))
    exp = tmp_path / "e.yaml"
    exp.write_text("plugins: [my_mix.py]\ndata:\n  mix: {name: plugin_file_mix, limit: 5}\n")
    cfg = compose(exp)
    assert cfg["data"]["mix"] == {"name": "plugin_file_mix", "limit": 5}
    assert cfg["plugins"][0].endswith("my_mix.py") and cfg["plugins"][0].startswith("/")


def test_plugin_module_from_config(tmp_path, monkeypatch):
    (tmp_path / "my_mix_mod.py").write_text(PLUGIN.format(name="plugin_module_mix"))
    monkeypatch.syspath_prepend(str(tmp_path))
    exp = tmp_path / "e.yaml"
    exp.write_text("plugins: [my_mix_mod]\ndata: {mix: plugin_module_mix}\n")
    assert compose(exp)["data"]["mix"]["limit"] == 3


def _installed_package(tmp_path) -> Path:
    """A site directory holding a package ``klear_ext`` with a ``klear_lab.plugins`` entry point."""
    pkg = tmp_path / "site"
    (pkg / "klear_ext").mkdir(parents=True)
    (pkg / "klear_ext" / "__init__.py").write_text(PLUGIN.format(name="entry_point_mix"))
    dist = pkg / "klear_ext-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: klear-ext\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[klear_lab.plugins]\next = klear_ext\n")
    return pkg


def test_entry_point_plugin_in_installed_package(tmp_path):
    """A package with a ``klear_lab.plugins`` entry point registers without any config mention."""
    exp = tmp_path / "e.yaml"
    exp.write_text("data: {mix: entry_point_mix}\n")
    code = ("import sys; from klear_lab.config.compose import compose; "
            f"print(compose({str(exp)!r})['data']['mix'])")
    out = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": str(_installed_package(tmp_path)),
                         "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "'name': 'entry_point_mix'" in out.stdout


@pytest.mark.parametrize(("code", "said"), [
    ("x = 1\ny = 1 / 0\n", "failed to import: ZeroDivisionError: division by zero at {init}:2"),
    ("def f(:\n    pass\n", "syntax error at {init}:1"),
    (PLUGIN.format(name="top_k"), "data_mix 'top_k' is already registered by "),
])
def test_a_broken_installed_plugin_is_named_with_its_file_and_line(tmp_path, code, said):
    """It said "entry point ... failed to load: division by zero": no type, file or line, as a module plugin
    gets; a name clash came quoted, as a KeyError prints (a walkthrough)."""
    site = _installed_package(tmp_path)
    init = site / "klear_ext" / "__init__.py"
    init.write_text(code)
    out = subprocess.run([sys.executable, "-m", "klear_lab.cli", "components", "clip"], env={
        "PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True,
        timeout=120)
    assert out.returncode == 2, out.stderr
    err = " ".join(out.stderr.split())
    assert f"entry point 'ext' (klear_ext) in group klear_lab.plugins: {said.format(init=init)}" in err, err
    assert "failed to load" not in err and '"' not in err


def _marks(listing: str) -> dict[str, str]:
    """``klear-lab components``' name cells: entry name -> its ``(plugin: ...)`` line ('' for a built-in)."""
    cells = [line.split("│")[1].strip() for line in listing.splitlines() if line.startswith("│")]
    return {name: (mark if mark.startswith("(plugin:") else "") for name, mark in zip(cells, [*cells[1:], ""])
            if name and not name.startswith("(plugin:") and name != "name"}


def test_components_marks_the_entries_plugins_registered(tmp_path, capsys, monkeypatch):
    """The listing showed a plugin's entries as if they were built in."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")
    (tmp_path / "listed_mix.py").write_text(PLUGIN.format(name="listed_file_mix"))
    assert main(["components", "data_mix", "--plugin", "listed_mix.py"]) == 0
    marks = _marks(capsys.readouterr().out)
    assert marks["listed_file_mix"] == "(plugin: listed_mix.py)"
    assert marks["top_k"] == marks["all"] == ""  # built-ins
    generated = "exec(compile({src!r}, 'generated', 'exec'), {{'__name__': __name__ + '_gen'}})\n"
    (tmp_path / "gen_mix.py").write_text(generated.format(src=PLUGIN.format(name="generated_mix")))
    assert main(["components", "data_mix", "--plugin", "gen_mix.py"]) == 0  # no file to name: a traceback before
    assert _marks(capsys.readouterr().out)["generated_mix"].startswith("(plugin: klear_plugin_")
    monkeypatch.syspath_prepend(str(_installed_package(tmp_path)))  # an installed package's entry point
    monkeypatch.setattr(plugins, "_loaded_entry_points", False)
    assert main(["components", "data_mix"]) == 0
    assert _marks(capsys.readouterr().out)["entry_point_mix"] == "(plugin: klear_ext)"


def test_the_unknown_name_hint_names_an_importable_decorator_for_every_axis():
    """The hint's ``@CLIP.register(...)`` and ``from klear_lab.registry import CLIP`` must name the axis's own
    registry: each axis's upper-cased name is the module attribute holding it."""
    import klear_lab.registry as registry

    for axis, reg in registry.REGISTRIES.items():
        assert getattr(registry, axis.upper()) is reg
        with pytest.raises(ConfigError, match=rf"`@{axis.upper()}\.register\('zz_not_registered_qq'\)`"):
            reg.get("zz_not_registered_qq")
