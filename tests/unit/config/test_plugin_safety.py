"""Plugins that go wrong: clean errors naming file and line, nothing left registered, built-ins kept;
every layer's plugins load; a run's identity follows the plugins' code, not their paths."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch

from klear_lab.config.compose import compose
from klear_lab.errors import ComponentError, ConfigError
from klear_lab.registry import DATA_MIX
from klear_lab.tracking import config_hash, write_config

EXPERIMENT = Path(__file__).resolve().parents[3] / "experiments" / "quickstart" / "sft.yaml"
HEAD = "from dataclasses import dataclass\nfrom typing import Literal\nfrom klear_lab.registry import DATA_MIX\n"


def mix(name: str, body: str = "limit: int = 3", call: str = "pools, ranks, seed") -> str:
    """A data-mix plugin registering ``name``."""
    return HEAD + textwrap.dedent(f'''
        @DATA_MIX.register("{name}")
        @dataclass(frozen=True)
        class Mix:
            """Test plugin."""
            {body}

            def __call__(self, {call}):
                return [r for recs in pools.values() for r in recs]
    ''')


BROKEN = {
    "syntax": (HEAD + "def broken(:\n    pass\n", r"syntax error at .*syntax\.py:4"),
    "name_error": (HEAD + "\n\nx = UNDEFINED\n", r"NameError: name 'UNDEFINED' is not defined at .*name_error\.py:6"),
    "not_frozen": (mix("nf").replace("(frozen=True)", ""), r"must be frozen: @dataclass\(frozen=True\)"),
    "decorator_order": (mix("order").replace('@DATA_MIX.register("order")\n@dataclass(frozen=True)',
                                             '@dataclass(frozen=True)\n@DATA_MIX.register("order")'),
                        r"goes under @DATA_MIX.register\('order'\) \(decorators apply bottom-up\)"),
    "no_default": (mix("nd", body="limit: int"), r"Mix.limit has no default"),
    "wrong_call": (mix("wc", call="pools"),
                   r"__call__ must take \(self, pools, ranks, seed\); it takes \(self, pools\)"),
    # defaults their own types refuse were blamed on "schema defaults", the plugin unnamed
    "default_type": (mix("dt", body='limit: int = "seven"'),
                     r"data_mix 'dt': the default of Mix.limit: 'seven' is not int at .*default_type\.py:5"),
    "default_choice": (mix("dc", body='mode: Literal["a", "b"] = "c"'),
                       r"the default of Mix.mode: 'c' is not one of 'a', 'b' at .*default_choice\.py:5"),
    "builtin_name": (mix("top_k"), r"data_mix 'top_k' is already registered by klear_lab.data.mixes.top_k"
                                   r"\.\w+ \(registered again at .*builtin_name\.py:5\)$"),
    # the command exited 3 without a word
    "exits": (HEAD + "import sys\nsys.exit(3)\n", r"it called sys.exit\(3\) while being imported"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_plugin_is_a_config_error_naming_it(tmp_path, case):
    source, message = BROKEN[case]
    path = tmp_path / f"{case}.py"
    path.write_text(source)
    with pytest.raises(ConfigError, match=message) as err:
        compose(EXPERIMENT, [f"plugins=[{path}]"])
    assert str(err.value).startswith(f"command line: plugin '{path}'")
    assert "top_k" in DATA_MIX.names() and DATA_MIX.get("top_k").__module__ == "klear_lab.data.mixes.top_k"


def test_defaults_a_plugins_own_check_refuses_are_said_to_be_its_own(tmp_path, registries_restored):
    """``k: int = 0`` refused by the plugin's ``__post_init__`` was blamed on the command line, where only
    the component's name was typed; a value the user set is still blamed on where they set it."""
    path = tmp_path / "strict.py"
    path.write_text(mix("strict", body="limit: int = 0\n\n            def __post_init__(self):\n"
                                        "                if self.limit < 1:\n"
                                        "                    raise ValueError(f'limit must be >= 1, "
                                        "got {self.limit}')"))
    with pytest.raises(ConfigError, match=rf"^command line: data.mix: data_mix 'strict': limit must be >= 1, got 0 "
                                          rf"\(with its own defaults, {re.escape(str(path))}:5\)$"):
        compose(EXPERIMENT, [f"plugins=[{path}]", "data.mix=strict"])
    with pytest.raises(ConfigError, match=r"^command line: data.mix: data_mix 'strict': limit must be >= 1, got -1$"):
        compose(EXPERIMENT, [f"plugins=[{path}]", "data.mix.name=strict", "data.mix.limit=-1"])
    assert compose(EXPERIMENT, [f"plugins=[{path}]", "data.mix.name=strict", "data.mix.limit=2"])


def test_a_name_two_plugin_files_register_names_the_first_file(tmp_path):
    """It named the first file's module (``klear_plugin_ea11eef2c1d4_ae656c0c.Mix``), made up from a hash."""
    first, second = tmp_path / "first.py", tmp_path / "second.py"
    first.write_text(mix("twice"))
    second.write_text(mix("twice", body="limit: int = 4"))
    with pytest.raises(ConfigError, match=rf"plugin '{second}': data_mix 'twice' is already registered by Mix in "
                                          rf"{first} \(registered again at {second}:5\)$"):
        compose(EXPERIMENT, [f"plugins=[{first},{second}]"])


@pytest.mark.parametrize("entry, says", [("DIR", "is a directory, not a .py file"),
                                         ('""', "plugins entries name a .py file or an importable module, got ''")])
def test_a_plugin_entry_that_is_a_directory_or_empty_says_so(tmp_path, entry, says):
    """A directory was "no such file"; an empty entry named importlib's own file as where it failed."""
    (tmp_path / "mine.py").mkdir()
    with pytest.raises(ConfigError, match=re.escape(says)):
        compose(EXPERIMENT, [f"plugins=[{entry.replace('DIR', str(tmp_path / 'mine.py'))}]"])


def test_a_plugin_that_fails_halfway_leaves_nothing_registered_and_loads_once_fixed(tmp_path):
    path = tmp_path / "half.py"
    path.write_text(mix("half_a") + "\nraise RuntimeError('boom')\n")
    with pytest.raises(ConfigError, match=r"RuntimeError: boom at .*half\.py"):
        compose(EXPERIMENT, [f"plugins=[{path}]"])
    assert "half_a" not in DATA_MIX.names()
    path.write_text(mix("half_a", body="limit: int = 7"))  # fixed: the edited file is imported again
    assert compose(EXPERIMENT, [f"plugins=[{path}]", "data.mix=half_a"])["data"]["mix"]["limit"] == 7


def test_a_builtin_name_taken_first_in_a_fresh_process_stays_the_builtin(tmp_path):
    """Built-ins load lazily: before, the plugin registered first and took the name for the whole process."""
    path = tmp_path / "dup.py"
    path.write_text(mix("top_k"))
    code = textwrap.dedent(f"""
        from klear_lab.config.compose import compose
        from klear_lab.errors import ConfigError
        from klear_lab.registry import DATA_MIX
        try:
            compose({str(EXPERIMENT)!r}, ["plugins=[{path}]"])
        except ConfigError as exc:
            print("refused:", exc)
        print(DATA_MIX.get("top_k").__module__, compose({str(EXPERIMENT)!r})["data"]["mix"]["name"])
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr
    refused, kept = out.stdout.strip().splitlines()
    assert "already registered by klear_lab.data.mixes.top_k" in refused
    assert kept.startswith("klear_lab.data.mixes.top_k ")


def test_unknown_component_hints_at_plugins_and_other_axes(tmp_path):
    with pytest.raises(ConfigError, match=r"a plugin's component needs its file under `plugins:`"):
        compose(EXPERIMENT, ["data.mix=zzz_not_here"])
    with pytest.raises(ConfigError, match=r"'top_k' is registered as a data_mix, not a difficulty_filter"):
        compose(EXPERIMENT, ["data.filter=top_k"])


def test_literal_parameters_are_checked(tmp_path):
    path = tmp_path / "lit.py"
    path.write_text(mix("lit_mix", body='mode: Literal["soft", "hard"] = "soft"'))
    assert compose(EXPERIMENT, [f"plugins=[{path}]", "data.mix=lit_mix", "data.mix.mode=hard"])["data"]["mix"][
        "mode"] == "hard"
    for bad in ("sofft", "1"):
        with pytest.raises(ConfigError, match=r"data.mix.mode: expected one of 'soft', 'hard'"):
            compose(EXPERIMENT, [f"plugins=[{path}]", "data.mix=lit_mix", f"data.mix.mode={bad}"])


def test_plugins_of_every_layer_load(tmp_path):
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.py").write_text(mix(f"layer_{name}"))
    (tmp_path / "base.yaml").write_text(f"base: {EXPERIMENT}\nplugins: [a.py]\ndata: {{filter: none}}\n")
    (tmp_path / "child.yaml").write_text("base: base.yaml\nplugins: [b.py, a.py]\ndata: {mix: layer_a}\n")
    cfg = compose(tmp_path / "child.yaml", [f"plugins=[{tmp_path / 'c.py'}]", "data.mix=layer_b"])
    assert [Path(p).name for p in cfg["plugins"]] == ["a.py", "b.py", "c.py"]
    (tmp_path / "b.py").write_text("raise ValueError('x')\n")  # each entry names the layer that listed it
    with pytest.raises(ConfigError, match=r"/child\.yaml: plugin '.*b\.py': failed to import: ValueError: x"):
        compose(tmp_path / "child.yaml", [f"plugins=[{tmp_path / 'c.py'}]"])


def test_plugins_null_clears_the_earlier_layers(tmp_path, monkeypatch):
    (tmp_path / "a.py").write_text(mix("cleared_a"))
    (tmp_path / "a2.py").write_text(mix("cleared_a2"))
    (tmp_path / "e.yaml").write_text(f"base: {EXPERIMENT}\nplugins: [a.py]\n")
    assert compose(tmp_path / "e.yaml", ["plugins=null"])["plugins"] == []
    monkeypatch.chdir(tmp_path)  # one command line: clear, then list another version (relative paths too)
    assert compose("e.yaml", ["plugins=null", "plugins=[a2.py]"])["plugins"] == [str(tmp_path / "a2.py")]
    assert compose("e.yaml", ["plugins.0=a2.py"])["plugins"] == [str(tmp_path / "a2.py")]


def test_a_failed_plugin_also_forgets_the_helpers_it_imported(tmp_path):
    (tmp_path / "helper_mixes.py").write_text(mix("from_helper"))
    (tmp_path / "main_plugin.py").write_text("import helper_mixes\nraise RuntimeError('typo')\n")
    with pytest.raises(ConfigError, match=r"RuntimeError: typo at .*main_plugin\.py:2"):
        compose(EXPERIMENT, [f"plugins=[{tmp_path / 'main_plugin.py'}]"])
    assert "from_helper" not in DATA_MIX.names()
    (tmp_path / "main_plugin.py").write_text("import helper_mixes\n")  # fixed: the helper registers again
    assert compose(EXPERIMENT, [f"plugins=[{tmp_path / 'main_plugin.py'}]", "data.mix=from_helper"])


def test_run_identity_follows_plugin_code_not_its_path(tmp_path):
    first, second = tmp_path / "one" / "mine.py", tmp_path / "two" / "mine.py"
    for path in (first, second):
        path.parent.mkdir()
        path.write_text(mix("ident_mix"))
    cfg = compose(EXPERIMENT, [f"plugins=[{first}]", "data.mix=ident_mix"])
    moved = dict(cfg, plugins=[str(second)])
    assert config_hash(cfg) == config_hash(moved)  # the same code elsewhere: a collaborator's checkout
    second.write_text(mix("ident_mix", body="limit: int = 4"))
    assert config_hash(cfg) != config_hash(moved)  # edited code: another run
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_config(run_dir, cfg)
    (saved,) = (run_dir / "plugins").glob("*.py")
    assert saved.read_text() == first.read_text() and saved.name.startswith("mine-")


def test_a_run_keeps_copies_of_the_helper_modules_a_plugin_imports(tmp_path):
    """A plugin may import a helper beside it; the run kept no copy of it. Its hash stays the plugin's own
    (hashing helpers would refuse the resume of earlier runs), and names that import from elsewhere
    (``random`` beside a ``random.py``) or cannot be read are not helpers (a review)."""
    (tmp_path / "mix_params.py").write_text("LIMIT = 3\n")
    (tmp_path / "mix_util.py").write_text("from mix_params import LIMIT\n")  # a helper's own helper
    (tmp_path / "random.py").write_text("# shadowed: the stdlib's random is what loads\n")
    (tmp_path / "unreadable.py").symlink_to(tmp_path / "missing.py")
    plugin = tmp_path / "helped.py"
    plugin.write_text("import random\nfrom mix_util import LIMIT\ndef _never():\n    import unreadable\n"
                      + mix("helped_mix"))
    with pytest.warns(UserWarning) as said:  # the shadowed helper is named; the others are not warned about
        cfg = compose(EXPERIMENT, [f"plugins=[{plugin}]", "data.mix=helped_mix"])
    shadowed = [str(w.message) for w in said if "beside it" in str(w.message)]
    assert len(shadowed) == 1 and re.search(rf"`import random` loads \S+/random\.py, not the helper "
                                            rf"{re.escape(str(tmp_path / 'random.py'))} beside it", shadowed[0])
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_config(run_dir, cfg)
    kept = sorted(p.name.split("-")[0] for p in (run_dir / "plugins").glob("*.py"))
    assert kept == ["helped", "mix_params", "mix_util"]
    from klear_lab.plugins import code_digest, plugin_digests

    assert plugin_digests([str(plugin)]) == ["sha256:" + code_digest(plugin)]


def test_wrong_return_types_name_the_component():
    from klear_lab.rl.aggregation.token_mean import TokenMean
    from klear_lab.rl.objective import rl_objective
    from klear_lab.rl.steps import score_groups
    from klear_lab.rl.types import AggContext, PolicyBatch

    class FloatReward:
        registered_name = "floaty"

        def __call__(self, completions, records):
            return [1.0 for _ in completions]

    with pytest.raises(ComponentError, match=r"reward 'floaty' \(.*test_plugin_safety\.py:\d+\) returned a list "
                                             r"holding float for 2 completions; a reward returns one RewardOutput"):
        score_groups(FloatReward(), ["a", "b"], [None, None], group_size=2)

    class TensorClip:
        registered_name = "bare"

        def __call__(self, logp, old_logp, adv, mask):
            return -(logp * mask)

    mask = torch.ones(1, 2)  # [N=1, T=2]
    batch = PolicyBatch(logp=torch.zeros(1, 2), old_logp=torch.zeros(1, 2), adv=torch.ones(1), mask=mask)
    with pytest.raises(TypeError, match=r"clip 'bare' \(.*\.py:\d+\) returned Tensor; a clip variant returns "
                                        r"ClipOutput"):  # a ComponentError, still a TypeError
        rl_objective(TensorClip(), TokenMean(), batch, AggContext.from_mask(mask))


def test_an_eval_reward_returning_too_few_verdicts_is_named():
    """Held-out scoring zipped the verdicts with the completions: a reward returning too few left the rest
    counted wrong, silently."""
    from types import SimpleNamespace

    from klear_lab.eval.heldout import score
    from klear_lab.rewards.base import RewardOutput

    class FirstOnly:
        registered_name = "first_only"

        def __call__(self, completions, records):
            return [RewardOutput(score=1.0, acc=True, format_ok=True)]

    records = [SimpleNamespace(task="math")] * 2
    with pytest.raises(ComponentError, match=r"reward 'first_only' \(.*\) returned a list of 1 for 4 completions"):
        score(records, [["a", "b"], ["c", "d"]], {"math": FirstOnly()})


def test_a_missing_import_inside_a_plugin_names_its_line(tmp_path):
    """It said "cannot import it: No module named ...", as if the plugin file itself were not found."""
    (tmp_path / "p.py").write_text(mix("imports_a_missing_module") + "\nimport no_such_helper_module_xyz\n")
    refused = (r"plugin '.*p\.py': failed to import: ModuleNotFoundError: No module named "
               rf"'no_such_helper_module_xyz' at {re.escape(str(tmp_path / 'p.py'))}:\d+")
    with pytest.raises(ConfigError, match=refused):
        compose(EXPERIMENT, [f"plugins=[{tmp_path / 'p.py'}]"])
    with pytest.raises(ConfigError, match=r"plugin '.*gone\.py': cannot import it: no such file"):
        compose(EXPERIMENT, [f"plugins=[{tmp_path / 'gone.py'}]"])


def test_a_helper_another_plugin_folder_serves_first_is_a_clash_unless_the_same_code(tmp_path):
    """``a/`` is on sys.path since its plugin loaded: b's ``import hutil`` ran a's ``hutil.py``, and the shadow
    warning blamed the standard library (a review); identical code was warned about though harmless."""
    for folder, text in (("a", "X = 'from a'\n"), ("b", "X = 'from b'\n")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "hutil_rt.py").write_text(text)
    (tmp_path / "a" / "plug_a_rt.py").write_text(mix("plug_a_rt_mix"))  # a's plugin does not import it
    (tmp_path / "b" / "plug_b_rt.py").write_text("import hutil_rt\n" + mix("plug_b_rt_mix"))
    compose(EXPERIMENT, [f"plugins=[{tmp_path / 'a' / 'plug_a_rt.py'}]"])
    with pytest.raises(ConfigError, match=rf"it imports 'hutil_rt', the helper {tmp_path / 'b' / 'hutil_rt.py'} "
                                          rf"beside it, but {tmp_path / 'a' / 'hutil_rt.py'} \(beside plugin "):
        compose(EXPERIMENT, [f"plugins=[{tmp_path / 'b' / 'plug_b_rt.py'}]"])
    (tmp_path / "b" / "hutil_rt.py").write_text("X = 'from a'\n")  # the same code: harmless, not warned about
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        compose(EXPERIMENT, [f"plugins=[{tmp_path / 'b' / 'plug_b_rt.py'}]"])
    assert not [w for w in said if "beside it" in str(w.message)]
