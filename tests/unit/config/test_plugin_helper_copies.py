"""A plugin's helper modules (``import helper`` of a ``helper.py`` beside it): an edited or deleted helper makes a
rerun of a saved config use the run's kept copies, as an edited plugin file does (it ran the new helper silently,
under the same config hash); two plugin folders' helpers of one name are refused (the second plugin ran the first
one's helper without a word, and the run kept one copy); the legitimate ways of sharing a helper still load.

Reruns run in a fresh process (``klear-lab config RUN/config.yaml``), as a user's rerun does: in this one the
helper is imported already. Each test's helper has its own name, for the same reason."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from klear_lab.config.compose import compose
from klear_lab.errors import ConfigError
from klear_lab.registry import DATA_MIX
from klear_lab.tracking import write_config

EXPERIMENT = Path(__file__).resolve().parents[3] / "experiments" / "quickstart" / "sft.yaml"

pytestmark = pytest.mark.usefixtures("registries_restored")


def plugin(mix: str, helper: str | None = None) -> str:
    """A data-mix plugin registering ``mix``; with ``helper``, it imports ``value()`` from that module and says
    on stderr what it returns (``mix=value``): which helper code a process ran."""
    says = f"import sys\nfrom {helper} import value\nprint('{mix}=' + str(value()), file=sys.stderr)\n"
    return (says if helper else "") + textwrap.dedent(f'''
        from dataclasses import dataclass
        from klear_lab.registry import DATA_MIX

        @DATA_MIX.register("{mix}")
        @dataclass(frozen=True)
        class Mix:
            """Test plugin."""
            limit: int = 3

            def __call__(self, pools, ranks, seed):
                return [r for recs in pools.values() for r in recs]
    ''')


def helper(value: int) -> str:
    return f"def value():\n    return {value}\n"


def saved_run(tmp_path: Path, plugins: list[Path], mix: str) -> Path:
    """A run directory holding what a run writes of its config: ``config.yaml`` and the kept plugin copies."""
    cfg = compose(EXPERIMENT, [f"plugins=[{','.join(map(str, plugins))}]", f"data.mix={mix}"])
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_config(run_dir, cfg)
    return run_dir


def said(done) -> str:
    return " ".join(done.stderr.split())


def test_a_rerun_after_a_helper_was_edited_uses_the_kept_copies_and_names_the_helper(tmp_path, klear_cli):
    """It ran the edited helper without a word: another result under the same config hash (a review)."""
    (tmp_path / "mine").mkdir()
    mine = tmp_path / "mine" / "edited_helper_plugin.py"
    mine.write_text(plugin("edited_helper_mix", "edited_helper_h"))
    (tmp_path / "mine" / "edited_helper_h.py").write_text(helper(15))
    run_dir = saved_run(tmp_path, [mine], "edited_helper_mix")
    (copy,) = (run_dir / "plugins").glob("edited_helper_plugin-*.py")
    (kept_helper,) = (run_dir / "plugins").glob("edited_helper_h-*.py")
    (tmp_path / "mine" / "edited_helper_h.py").write_text(helper(30))

    done = klear_cli("config", str(run_dir / "config.yaml"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "edited_helper_mix=15" in done.stderr  # the code the run ran, not 30
    assert (f"helper module {tmp_path / 'mine' / 'edited_helper_h.py'} of plugin '{mine}' changed since this run "
            f"started; the copies of the code the run ran are used: {copy}") in said(done)
    assert kept_helper.name in said(done)
    assert yaml.safe_load(done.stdout)["plugins"] == [str(copy.resolve())]  # the same hash: the same code

    (tmp_path / "mine" / "edited_helper_h.py").write_text(helper(15))  # undone: the plugin file runs, unwarned
    done = klear_cli("config", str(run_dir / "config.yaml"))
    assert done.returncode == 0 and "warning" not in done.stderr, done.stderr[-3000:]
    assert yaml.safe_load(done.stdout)["plugins"] == [str(mine)]


def test_a_helper_of_a_helper_edited_or_deleted_also_uses_the_kept_copies(tmp_path, klear_cli):
    (tmp_path / "mine").mkdir()
    mine = tmp_path / "mine" / "deep_helper_plugin.py"
    mine.write_text(plugin("deep_helper_mix", "deep_helper_outer"))
    (tmp_path / "mine" / "deep_helper_outer.py").write_text("from deep_helper_inner import value\n")
    (tmp_path / "mine" / "deep_helper_inner.py").write_text(helper(7))
    run_dir = saved_run(tmp_path, [mine], "deep_helper_mix")
    (tmp_path / "mine" / "deep_helper_inner.py").write_text(helper(8))
    done = klear_cli("config", str(run_dir / "config.yaml"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "deep_helper_mix=7" in done.stderr
    assert f"helper module {tmp_path / 'mine' / 'deep_helper_inner.py'} of plugin" in said(done)

    (tmp_path / "mine" / "deep_helper_inner.py").unlink()  # it stopped on "No module named deep_helper_inner"
    done = klear_cli("config", str(run_dir / "config.yaml"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "deep_helper_mix=7" in done.stderr
    assert f"helper module {tmp_path / 'mine' / 'deep_helper_inner.py'} of plugin '{mine}' is gone" in said(done)


def test_the_kept_helper_wins_over_the_edited_one_another_plugin_of_its_folder_put_on_the_path(tmp_path,
                                                                                               klear_cli):
    """A plugin from the same folder that does not import the helper loads from the folder first: the folder
    is on ``sys.path`` then, and ``import helper`` in the kept copy found the edited ``helper.py`` there."""
    (tmp_path / "mine").mkdir()
    plain = tmp_path / "mine" / "path_first_plain.py"
    plain.write_text(plugin("path_first_plain_mix"))
    helped = tmp_path / "mine" / "path_first_helped.py"
    helped.write_text(plugin("path_first_helped_mix", "path_first_h"))
    (tmp_path / "mine" / "path_first_h.py").write_text(helper(1))
    run_dir = saved_run(tmp_path, [plain, helped], "path_first_helped_mix")
    (tmp_path / "mine" / "path_first_h.py").write_text(helper(2))
    done = klear_cli("config", str(run_dir / "config.yaml"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "path_first_helped_mix=1" in done.stderr
    assert [Path(p).parent for p in yaml.safe_load(done.stdout)["plugins"]] == [plain.parent, run_dir / "plugins"]


def test_a_saved_config_naming_the_kept_copy_itself_imports_its_helpers_from_their_copies(tmp_path, klear_cli):
    """What a resume on a kept copy saves: the rerun, or a second resume, in place stopped on "No module named
    <the helper>" (the copy is named helper-SHA8.py)."""
    (tmp_path / "mine").mkdir()
    mine = tmp_path / "mine" / "in_place_plugin.py"
    mine.write_text(plugin("in_place_mix", "in_place_h"))
    (tmp_path / "mine" / "in_place_h.py").write_text(helper(5))
    run_dir = saved_run(tmp_path, [mine], "in_place_mix")
    (copy,) = (run_dir / "plugins").glob("in_place_plugin-*.py")
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    (run_dir / "config.yaml").write_text(yaml.safe_dump({**saved, "plugins": [str(copy)]}))
    (tmp_path / "mine" / "in_place_h.py").write_text(helper(6))  # not the code the run ran, and beside no copy
    done = klear_cli("config", str(run_dir / "config.yaml"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "in_place_mix=5" in done.stderr and "warning" not in done.stderr


def test_helpers_of_one_name_in_two_plugin_folders_are_refused_before_the_run_starts(tmp_path, klear_cli,
                                                                                      tiny_sft_overrides):
    """``a/utils.py`` and ``b/utils.py``: b's plugin ran a's ``utils`` without a word, the run kept one copy."""
    for folder, value in (("a", 111), ("b", 222)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "utils.py").write_text(helper(value))
        (tmp_path / folder / f"flt_{folder}.py").write_text(plugin(f"clash_{folder}", "utils"))
    a, b = tmp_path / "a" / "flt_a.py", tmp_path / "b" / "flt_b.py"
    done = klear_cli("train", str(EXPERIMENT), *tiny_sft_overrides, f"plugins=[{a},{b}]")  # out_dir: tmp_path/runs
    assert done.returncode == 2, done.stderr[-3000:]
    message = said(done)
    assert f"plugin '{b}': it imports 'utils', the helper {tmp_path / 'b' / 'utils.py'} beside it, but plugin {a} " \
           f"already imported 'utils' from {tmp_path / 'a' / 'utils.py'}" in message
    assert "Rename one of the two helper files" in message
    assert "clash_b=" not in done.stderr and not (tmp_path / "runs").exists()


def test_a_clash_in_process_leaves_nothing_of_the_refused_plugin_and_identical_helpers_load(tmp_path):
    for folder, value in (("a", 1), ("b", 2), ("c", 1)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "clash_proc_utils.py").write_text(helper(value))
        (tmp_path / folder / f"proc_{folder}.py").write_text(plugin(f"clash_proc_{folder}", "clash_proc_utils"))
    a, b, c = (tmp_path / f / f"proc_{f}.py" for f in "abc")
    with pytest.raises(ConfigError, match=rf"plugin '{b}': it imports 'clash_proc_utils'.* Rename one"):
        compose(EXPERIMENT, [f"plugins=[{a},{b}]"])
    assert "clash_proc_b" not in DATA_MIX.names()
    cfg = compose(EXPERIMENT, [f"plugins=[{a},{c}]", "data.mix=clash_proc_c"])  # the same code twice: harmless
    assert cfg["data"]["mix"]["name"] == "clash_proc_c"


def test_the_legitimate_ways_to_share_a_helper_still_load(tmp_path):
    """Two plugins of one folder sharing a helper (the run keeps one copy of it), one plugin listed by two
    layers, and a plugin edited and loaded again in the same process (a notebook)."""
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "shared_ok_h.py").write_text(helper(4))
    one, two = tmp_path / "mine" / "shared_one.py", tmp_path / "mine" / "shared_two.py"
    one.write_text(plugin("shared_one_mix", "shared_ok_h"))
    two.write_text(plugin("shared_two_mix", "shared_ok_h"))
    (tmp_path / "base.yaml").write_text(f"base: {EXPERIMENT}\nplugins: [{one}]\n")
    (tmp_path / "child.yaml").write_text(f"base: base.yaml\nplugins: [{one}, {two}]\n")
    run_dir = saved_run(tmp_path, [one, two], "shared_two_mix")
    assert sorted(p.name.split("-")[0] for p in (run_dir / "plugins").glob("*.py")) == [
        "shared_ok_h", "shared_one", "shared_two"]
    assert compose(tmp_path / "child.yaml", ["data.mix=shared_one_mix"])["plugins"] == [str(one), str(two)]
    two.write_text(plugin("shared_two_renamed", "shared_ok_h"))
    compose(EXPERIMENT, [f"plugins=[{one},{two}]", "data.mix=shared_two_renamed"])
    assert "shared_two_mix" not in DATA_MIX.names()


def test_a_kept_copy_then_its_edited_original_in_one_process_is_told_to_use_two_processes(tmp_path):
    """A rerun of a saved config (its kept helper copy served) and then the experiment file (the edited helper),
    in one notebook, were refused with "rename one of the two helper files": one of them is a run's copy."""
    import subprocess
    import sys

    (tmp_path / "mine").mkdir()
    mine = tmp_path / "mine" / "kept_clash_plugin.py"
    mine.write_text(plugin("kept_clash_mix", "kept_clash_h"))
    (tmp_path / "mine" / "kept_clash_h.py").write_text(helper(1))
    run_dir = saved_run(tmp_path, [mine], "kept_clash_mix")
    (tmp_path / "mine" / "kept_clash_h.py").write_text(helper(2))
    code = textwrap.dedent(f"""
        import warnings
        from klear_lab.config.compose import compose
        from klear_lab.errors import ConfigError
        warnings.simplefilter("ignore")
        compose({str(run_dir / "config.yaml")!r})
        try:
            compose({str(EXPERIMENT)!r}, ["plugins=[{mine}]", "data.mix=kept_clash_mix"])
        except ConfigError as exc:
            print(exc)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    message = " ".join(done.stdout.split())
    assert "one process holds one module per name" in message, done.stderr[-2000:]
    assert "run the saved config and the edited plugin in separate processes" in message
    assert "Rename one" not in message


def test_two_plugins_of_one_file_name_in_two_folders_each_rerun_their_own_copy(tmp_path, klear_cli):
    """Rerun of such a run took the last-sorted copy for both: a false "changed" warning, then "already
    registered" (exit 2), on a run nothing had changed in (a walkthrough)."""
    files = []
    for folder, mix in (("c", "same_name_c"), ("d", "same_name_d")):
        (tmp_path / folder).mkdir()
        files.append(tmp_path / folder / "same_name_mix.py")
        files[-1].write_text(plugin(mix))
    run_dir = saved_run(tmp_path, files, "same_name_c")
    assert len(list((run_dir / "plugins").glob("same_name_mix-*.py"))) == 2
    done = klear_cli("config", str(run_dir / "config.yaml"))
    assert done.returncode == 0 and "warning" not in done.stderr, done.stderr[-3000:]
    assert yaml.safe_load(done.stdout)["plugins"] == [str(f) for f in files]

    files[0].write_text(plugin("same_name_c") + "\n# edited\n")  # c's own copy runs, d's file
    done = klear_cli("config", str(run_dir / "config.yaml"))
    assert done.returncode == 0, done.stderr[-3000:]
    ran = yaml.safe_load(done.stdout)["plugins"]
    assert ran[1] == str(files[1]) and "same_name_c" in Path(ran[0]).read_text() and Path(ran[0]).parent.name == \
        "plugins", ran
