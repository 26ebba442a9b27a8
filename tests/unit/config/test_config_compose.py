"""Config composition order, shorthand, and every error path (file, key, did-you-mean, type, component)."""

from __future__ import annotations

from pathlib import Path

import pytest

from klear_lab.config.compose import compose
from klear_lab.config.layers import dotlist_layer, file_layers
from klear_lab.config.merge import merge_layers
from klear_lab.config.yaml_io import dump_yaml
from klear_lab.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]


def write(path, text):
    path.write_text(text)
    return path


def test_order_defaults_base_experiment_cli(tmp_path):
    write(tmp_path / "base.yaml", "optim: {lr: 0.5, warmup_steps: 7}\nrun: {name: from-base}\n")
    exp = write(tmp_path / "exp.yaml", "base: base.yaml\noptim: {lr: 0.25}\n")
    cfg = compose(exp, ["optim.lr=0.125"])
    assert cfg["optim"]["lr"] == 0.125          # CLI beats experiment
    assert cfg["optim"]["warmup_steps"] == 7    # base beats defaults
    assert cfg["run"]["name"] == "from-base"
    assert cfg["optim"]["grad_clip"] == 1.0     # schema default filled in
    cfg = compose(exp, [], extra_layers=[dotlist_layer(["optim.lr=2"], "sweep trial 0")])
    assert cfg["optim"]["lr"] == 2.0            # trial layer last


def test_component_defaults_expanded_and_switch_drops_old_params(tmp_path):
    exp = write(tmp_path / "e.yaml", "data:\n  mix: {name: top_k, k: 2, budget: 100}\n")
    cfg = compose(exp)
    assert cfg["data"]["mix"] == {"name": "top_k", "k": 2, "budget": 100, "select": "random", "kcenter_dim": 256}
    cfg = compose(exp, ["data.mix=all"])        # shorthand switches component, drops k/budget
    assert cfg["data"]["mix"] == {"name": "all"}
    cfg = compose(exp, ["data.filter=band"])
    assert cfg["data"]["filter"]["min_level"] == 1  # defaults of the new component


def test_float_written_without_dot_is_a_float(tmp_path):
    exp = write(tmp_path / "e.yaml", "optim: {lr: 2e-3}\n")
    assert compose(exp)["optim"]["lr"] == pytest.approx(2e-3)


def test_list_index_override(tmp_path):
    exp = write(tmp_path / "e.yaml", "data:\n  sources: [{name: arith_r1, n_prompts: 10}]\n")
    cfg = compose(exp, ["data.sources.0.n_prompts=5"])
    assert cfg["data"]["sources"][0]["n_prompts"] == 5 and cfg["data"]["sources"][0]["name"] == "arith_r1"


@pytest.mark.parametrize(("body", "overrides", "needles"), [
    ("optim: {lrr: 1}\n", [], ["e.yaml", "optim.lrr", "did you mean", "optim.lr"]),
    ("", ["optim.lrr=1"], ["command line", "optim.lrr", "optim.lr"]),
    ("optim: {lr: fast}\n", [], ["e.yaml", "optim.lr", "expected float", "str"]),
    ("sft: {max_steps: 1.5}\n", [], ["sft.max_steps", "expected int", "float"]),
    ("data: {mix: {name: top_kk}}\n", [], ["e.yaml", "data.mix.name", "unknown data_mix", "top_k", "weighted"]),
    ("data: {mix: {name: top_k, kk: 1}}\n", [], ["data.mix.kk", "did you mean", "data.mix.k"]),
    ("model: {tiny: {size: 3m}}\n", [], ["model.tiny", "size must be one of"]),
    ("plugins: [no_such_module_xyz]\n", [], ["plugin 'no_such_module_xyz': cannot import it",
                                                "on PYTHONPATH"]),
    ("base: missing.yaml\n", [], ["missing.yaml", "not found"]),
    ("optim: {lr: [1\n", [], ["e.yaml:", "malformed YAML"]),
    ("- 1\n- 2\n", [], ["top level must be a mapping"]),
    ("run: {seed: '${nope}'}\n", [], ["interpolation"]),
    # malformed YAML in an override: the override is named (it was a raw yaml.ScannerError traceback)
    ("", ["rl.steps=3", "data.sources=[{name:arith_r1,levels:[1]}]"],
     ["command line", "'data.sources=[{name:arith_r1,levels:[1]}]'", "`key: value`, with a space"]),
    ("", ["optim.lr=[1"], ["command line", "'optim.lr=[1'", "did not find expected"]),
    # a list's or mapping's items: "expected list, got list" said nothing; a mapping's values went unchecked
    # (fields={prompt: 5} crashed at load with an AttributeError, exit 1)
    ("data: {sources: [{name: arith_r1, levels: [1, x]}]}\n", [],
     ["data.sources.0.levels", "expected a list of int, got list"]),
    ("", ["data.sources=[{name: file, path: x.jsonl, fields: {prompt: 5}}]"],
     ["data.sources.0.fields", "expected a mapping of str to str", "'prompt': 5"]),
    ("", ["data.mix={name: weighted, weights: {arith_r1: abc}}"],
     ["data.mix.weights", "expected a mapping of str to float"]),
])
def test_errors_name_the_place(tmp_path, body, overrides, needles):
    exp = write(tmp_path / "e.yaml", body or "{}\n")  # an empty file is refused itself
    with pytest.raises(ConfigError) as err:
        compose(exp, overrides)
    for needle in needles:
        assert needle in str(err.value), (needle, str(err.value))


def test_a_yaml_file_that_is_not_utf8_or_cannot_be_read_is_named(tmp_path, monkeypatch):
    """Both were tracebacks (UnicodeDecodeError, PermissionError) from every command that reads YAML."""
    exp = tmp_path / "e.yaml"
    exp.write_bytes(b"run: {name: \xff}\n")
    with pytest.raises(ConfigError, match=r"e\.yaml: not UTF-8 text \(byte 0xff at offset 12\)"):
        compose(exp)

    def refuse(self, *args, **kwargs):  # root reads a chmod-000 file: the test stands in for the refusal
        raise PermissionError(13, "Permission denied", str(self))

    write(exp, "{}\n")
    monkeypatch.setattr(Path, "read_text", refuse)
    with pytest.raises(ConfigError, match=r"e\.yaml: cannot read: Permission denied"):
        compose(exp)


def test_bad_override_syntax(tmp_path):
    exp = write(tmp_path / "e.yaml", "{}\n")
    with pytest.raises(ConfigError, match="key=value"):
        compose(exp, ["optim.lr"])


def test_circular_base(tmp_path):
    write(tmp_path / "a.yaml", "base: b.yaml\n")
    write(tmp_path / "b.yaml", "base: a.yaml\n")
    with pytest.raises(ConfigError, match="circular"):
        compose(tmp_path / "a.yaml")


def test_missing_experiment_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        compose(tmp_path / "nope.yaml")


def test_command_line_paths_are_made_absolute(tmp_path, monkeypatch):
    """A saved config must work from any directory: typed plugin / init_from paths are the shell's."""
    from klear_lab.config.layers import dotlist_layer

    monkeypatch.chdir(tmp_path)
    _, body = dotlist_layer(["plugins=[my_reward.py,some.module]", "model.init_from=exp/sft.yaml"])
    assert body["plugins"] == [str(tmp_path / "my_reward.py"), "some.module"]
    assert body["model"]["init_from"] == str(tmp_path / "exp" / "sft.yaml")


@pytest.mark.parametrize(("override", "needle"), [
    ("optim.grad_clip=-1", "optim.grad_clip must be >= 0 (0 = no clipping), got -1"),  # would reverse gradients
    ("optim.min_lr=0.01", "optim.min_lr (0.01) must lie in [0, optim.lr] (0.003)"),
    ("optim.warmup_steps=-5", "optim.warmup_steps must be >= 0"),
    ("optim.weight_decay=-0.1", "optim.weight_decay must be >= 0"),
    ("optim.betas=[0.9,1.0]", "optim.betas must be two numbers in [0, 1)"),
    ("sft.loss=seq-mean", "sft.loss is 'seq-mean'; one of token-mean, step-token-mean"),
    ("sft.grad_accum=0", "sft.grad_accum must be >= 1, got 0"),
    ("sft.tokens_per_micro_batch=10", "sft.tokens_per_micro_batch (10) is less than one packed row of "
                                      "data.max_length (100)"),
    ("sft.epochs=0", "sft.epochs must be > 0 when sft.max_steps is not set"),
    ("trainer.num_threads=-1", "trainer.num_threads must be >= 0 (0 = cores // parallel workers), got -1"),
    ("model.tokenizer_vocab=10", "model.tokenizer_vocab (10) must be >= 263"),  # BPE learned no merge, silently
    ("model.attn_implementation=flash_attention_2",  # packed examples of 12 rows would attend to each other
     "sft.tokens_per_micro_batch (1200) gives 12 packed rows of data.max_length (100) a micro-batch"),
])
def test_values_that_would_train_wrongly_or_silently_differently_are_refused(override, needle):
    with pytest.raises(ConfigError) as err:
        compose(ROOT / "experiments/quickstart/sft.yaml", [override])
    assert needle in str(err.value)


def test_flash_attention_packs_one_row_a_micro_batch_or_none():
    for overrides in (["sft.tokens_per_micro_batch=100"], ["data.pack=false"]):
        compose(ROOT / "experiments/quickstart/sft.yaml", ["model.attn_implementation=flash_attention_2", *overrides])


def test_the_smallest_tokenizer_vocab_trains_and_an_hf_model_ignores_it():
    from klear_lab.models.tokenizer import MIN_VOCAB, train_tokenizer

    assert len(train_tokenizer(["12+34=46 <think>ok</think>"], vocab_size=MIN_VOCAB)) == MIN_VOCAB
    compose(ROOT / "experiments/quickstart/sft.yaml", ["model.name_or_path=some/model", "model.tokenizer_vocab=10"])


@pytest.mark.parametrize(("override", "needle"), [
    ("rl.overlong=penalty rl.overlong_buffer=200", "rl.overlong_buffer (200) must be in (0, rl.max_new_tokens=128]"),
    ("rl.overlong_penalty=-1", "rl.overlong_penalty must be >= 0"),
    ("rl.micro_batch_seqs=-1", "rl.micro_batch_seqs must be >= 0"),
    ("rl.eval_every=-1", "rl.eval_every must be >= 0"),
    ("eval.every_n_steps=-2", "eval.every_n_steps must be >= 0"),
    ("run.seed=-1", "run.seed must be in [0, 2**32)"),  # Lightning's seed_everything raised mid-start
    ("rl.top_p=0.9", "rl.top_p is 0.9, but only 1 is supported"),  # the ratio ignored the nucleus: off-policy
    ("model.dtype=bfloat", "model.dtype must be one of float32, bfloat16"),  # was an AttributeError traceback
    ("tracking.wandb.mode=ofline", "tracking.wandb.mode must be one of offline, online, disabled"),  # ran online
    ("trainer.log_every_n_steps=-5", "trainer.log_every_n_steps must be >= 0"),
    ("tracking.wandb.log_samples=-1", "tracking.wandb.log_samples must be >= 0"),  # was [:-1]: all samples but one
    ("rl.clip=gspo", "rl.aggregation is 'token-mean', but clip 'gspo' clips whole sequences"),  # weighted by length
])
def test_rl_values_that_would_fail_mid_run_are_refused(override, needle):
    with pytest.raises(ConfigError) as err:
        compose(ROOT / "experiments/quickstart/rl.yaml", override.split())
    assert needle in str(err.value)


def test_a_sequence_level_clip_composes_with_the_aggregation_it_is_defined_with():
    cfg = compose(ROOT / "experiments/quickstart/rl.yaml", ["rl.clip=gspo", "rl.aggregation=seq-mean-token-mean"])
    assert (cfg["rl"]["clip"]["name"], cfg["rl"]["aggregation"]["name"]) == ("gspo", "seq-mean-token-mean")


def test_min_lr_is_free_under_a_constant_schedule():
    cfg = compose(ROOT / "experiments/quickstart/sft.yaml", ["optim.schedule=constant", "optim.min_lr=1"])
    assert cfg["optim"]["min_lr"] == 1


@pytest.mark.parametrize("overrides", [["rl.clip=cispo", "rl.clip.eps_high=0.5"],
                                       ["rl.clip.eps_high=0.5", "rl.clip=cispo"]])
def test_a_component_switched_and_tuned_on_the_command_line_is_both(overrides):
    """``rl.clip=cispo rl.clip.eps_high=0.5`` used to train GPPO: the second override replaced the first."""
    clip = compose(ROOT / "experiments/quickstart/rl.yaml", overrides)["rl"]["clip"]
    assert clip == {"name": "cispo", "eps_low": 0.2, "eps_high": 0.5}


def test_naming_another_component_on_the_same_line_drops_the_first_ones_parameters():
    cfg = compose(ROOT / "experiments/quickstart/rl.yaml", ["rl.clip={name: gppo, eps_high: 0.9}", "rl.clip=cispo"])
    assert cfg["rl"]["clip"] == {"name": "cispo", "eps_low": 0.2, "eps_high": 0.28}


@pytest.mark.parametrize("overrides", [["data.sources.0.name=arith"],
                                       ["data.sources.0.name=arith", "data.sources.0.n_prompts=50"]])
def test_renaming_an_item_of_a_component_list_drops_the_earlier_items_parameters(overrides):
    """``data.sources.0.name=arith`` on the quickstart SFT kept arith_r1's n_prompts, levels and style: a
    source the experiment never asked for. Now it is what ``data.sources=[{name: arith}]`` gives."""
    sft = ROOT / "experiments/quickstart/sft.yaml"
    whole = compose(sft, ["data.sources=[{name: arith}]", *overrides[1:]])["data"]["sources"]
    assert compose(sft, overrides)["data"]["sources"] == whole
    assert compose(sft, ["data.sources.0.name=arith_r1"])["data"]["sources"] == compose(sft)["data"]["sources"]


def test_a_bad_component_value_names_where_it_was_set():
    with pytest.raises(ConfigError, match=r"^command line: rl.clip: clip 'cispo': eps_high must be in \(0, inf\)"):
        compose(ROOT / "experiments/quickstart/rl.yaml", ["rl.clip=cispo", "rl.clip.eps_high=0"])
    with pytest.raises(ConfigError, match=r"^experiments/quickstart/rl.yaml \+ command line: rl.clip: clip 'gppo'"):
        compose(ROOT / "experiments/quickstart/rl.yaml", ["rl.clip.eps_high=0"])


def test_overrides_reach_into_a_list_set_on_the_same_command_line():
    cfg = compose(ROOT / "experiments/quickstart/sft.yaml", [
        "data.sources=[{name: arith_r1, n_prompts: 7}, {name: arith_r1, seed_offset: 1}]",
        "data.sources.1.n_prompts=9", "data.sources.0.levels=[1,2]", "data.sources.0.level_weights=[1,1]"])
    assert [(s["n_prompts"], s["seed_offset"]) for s in cfg["data"]["sources"]] == [(7, 0), (9, 1)]
    assert cfg["data"]["sources"][0]["levels"] == [1, 2]
    with pytest.raises(ConfigError, match=r"command line: data.sources.3: index out of range"):
        compose(ROOT / "experiments/quickstart/sft.yaml", ["data.sources.3.n_prompts=9"])
    two = ["data.sources=[{name: arith_r1}, {name: arith}]", "data.sources.2.n_prompts=9"]
    with pytest.raises(ConfigError, match=r"data.sources is a list of 2 items: data.sources.0 to data.sources.1\)"):
        compose(ROOT / "experiments/quickstart/sft.yaml", two)


@pytest.mark.parametrize("override, needle", [
    # a key that is not an index replaced the list of sources with one mapping
    ("data.sources.name=arith_web", "command line: data.sources: a mapping (name) where a list is expected "
                                    "(data.sources is a list of 1 item: data.sources.0); give the whole list"),
    ("data.sources.0.name=5", "command line: data.sources.0 must be a source component"),  # was the file's fault
    (".optim.lr=3", "override '.optim.lr=3': the key '.optim.lr' has an empty part"),  # was "unknown key ''"
    ("optim.betas.beta1=0.9", "optim.betas: a mapping (beta1) where a list is expected (optim.betas is a list of 2 "
                              "items: optim.betas.0 to optim.betas.1); give the whole list, `optim.betas: [...]` in a "
                              "file or optim.betas=[...] on a command line"),  # no `optim.betas.0.beta1`: floats
    (" =3", "override ' =3' must look like key=value"),
    ("optim..lr=3", "the key 'optim..lr' has an empty part"),
    # a key of another section: the closest spelling in this one was suggested (rl.grad_clip: 'rl.clip')
    ("sft.warmup_steps=3", "unknown key 'sft.warmup_steps' (did you mean 'optim.warmup_steps'?)"),
    ("sft.max_new_tokens=64", "unknown key 'sft.max_new_tokens' (did you mean 'eval.max_new_tokens'?)"),
    # but not another kind's section (refused next) nor run.name: the section's own near spelling stays
    ("sft.steps=2", "unknown key 'sft.steps' (did you mean 'sft.max_steps'?)"),
    ("model.name=Qwen/Qwen3-8B", "unknown key 'model.name'; allowed under model"),
    ("data.sources.-1.n_prompts=5", "data.sources.-1: not an index"),
    ("data.sources.01.n_prompts=5", "data.sources.01: not an index"),
    ("plugins.0=x.py", "plugins.0: index out of range (plugins is an empty list: set it whole, plugins=[...])"),
    # were a traceback when the model was built, NaN losses (rope_theta=0), or an empty data set
    ("model.tiny.hidden_size=-1", "model.tiny: model 'qwen2': hidden_size must be >= 0"),
    ("model.tiny.num_heads=5", "hidden_size 192 must split into num_heads 5 heads of an even size"),
    ("model.tiny.num_kv_heads=5", "num_heads 12 must be a multiple of num_kv_heads 5"),
    ("model.tiny.rope_theta=0", "rope_theta > 0"),
    ("data.sources.0.n_prompts=0", "data.sources.0: source 'arith_r1': n_prompts must be >= 1, got 0"),
    ("data.sources.0.responses_per_prompt=-1", "responses_per_prompt must be >= 1"),
    ("data.sources.0.level_weights=[0]", "level_weights must be >= 0 with a positive sum"),
])
def test_sft_overrides_that_would_misread_crash_or_train_on_nan_are_refused(override, needle):
    with pytest.raises(ConfigError) as err:
        compose(ROOT / "experiments/quickstart/sft.yaml", [override])
    assert needle in str(err.value)


def test_an_index_into_a_nested_list_sets_one_item():
    body = dotlist_layer(["a=[[1, 2], [3]]", "a.0.1=5", "a.1.0=6"])[1]
    assert body["a"] == [[1, 5], [6]]


def test_an_indexed_override_is_the_command_lines_only_for_what_it_sets():
    """The rest of the item keeps the file as its source, so errors name both."""
    with pytest.raises(ConfigError, match=r"^experiments/quickstart/sft.yaml \+ command line: data.sources.0: "
                                          r"source 'arith_r1': style must be one of"):
        compose(ROOT / "experiments/quickstart/sft.yaml", ["data.sources.0.style=bogus"])
    layers = file_layers(ROOT / "experiments/quickstart/sft.yaml") + [dotlist_layer(["data.sources.0.n_prompts=5"])]
    provenance = merge_layers(layers)[1]
    assert provenance["data.sources.0.n_prompts"] == "command line"
    assert provenance["data.sources.0.name"] == "experiments/quickstart/sft.yaml"
    assert not any(".item" in k for k in provenance)
    file_sources = [body["data"]["sources"] for label, body in layers[:-1] if "sources" in body.get("data", {})]
    assert file_sources and all(s.get("n_prompts") != 5 for sources in file_sources for s in sources)  # not edited


def test_torch_dtype_names_and_aliases_are_accepted():
    for name in ("bfloat16", "half", "double"):  # getattr(torch, name) builds the model
        assert compose(ROOT / "experiments/quickstart/sft.yaml", [f"model.dtype={name}"])["model"]["dtype"] == name


def test_init_from_on_a_run_that_does_not_read_it_is_refused():
    """An SFT run ignored model.init_from and trained a fresh tiny model."""
    parent = ROOT / "experiments/quickstart/sft.yaml"
    with pytest.raises(ConfigError, match=r"model.init_from .* is read by RL runs only"):
        compose(ROOT / "experiments/quickstart/sft.yaml", [f"model.init_from={parent}"])
    assert compose(ROOT / "experiments/quickstart/rl.yaml", ["run.kind=eval"])  # eval says more when it starts


def test_an_unknown_attention_kernel_is_refused_when_the_model_is_built():
    """Was accepted, then a KeyError traceback at the first forward pass, inside a started run."""
    from klear_lab.build_model import build_tokenizer_and_model

    cfg = compose(ROOT / "experiments/quickstart/sft.yaml", ["model.attn_implementation=bogus"])
    with pytest.raises(ConfigError, match=r"^model.attn_implementation 'bogus': .*not supported"):
        build_tokenizer_and_model(cfg, ["1 + 2 = 3"] * 20)
    cfg = compose(ROOT / "experiments/quickstart/sft.yaml", ["model.attn_implementation=eager"])
    assert build_tokenizer_and_model(cfg, ["1 + 2 = 3"] * 20)[1].config._attn_implementation == "eager"


def test_a_bad_value_names_the_file_or_command_line_that_set_it(tmp_path):
    """Cross-field checks named the key only ("run.kind must be ..."), unlike every other key error."""
    exp = tmp_path / "exp.yaml"
    exp.write_text(f"base: {ROOT / 'experiments/quickstart/sft.yaml'}\nrun: {{kind: sfft}}\n")
    with pytest.raises(ConfigError, match=rf"^run.kind must be 'sft', 'rl' or 'eval', got 'sfft' "
                                          rf"\(run.kind from {exp}\)$"):
        compose(exp)
    with pytest.raises(ConfigError, match=r"^optim.lr must be > 0, got -1.0 \(optim.lr from command line\)$"):
        compose(ROOT / "experiments/quickstart/sft.yaml", ["optim.lr=-1"])


def test_plugins_given_as_a_string_are_refused_with_the_list_form():
    """``plugins=my/p.py`` was read as its characters: "plugin 'm': cannot import it"."""
    with pytest.raises(ConfigError, match=r"command line: plugins: must be a list, got 'my/p.py'; write "
                                          r"plugins=\[my/p.py\]"):
        compose(ROOT / "experiments/quickstart/sft.yaml", ["plugins=my/p.py"])


def test_a_notebook_composes_from_a_mapping_and_run_experiment_says_how(tmp_path, monkeypatch):
    """A notebook builds its experiment in Python: compose() takes a dict or an OmegaConf config (its base:
    read from the working directory), overrides after it. run_experiment on an uncomposed config failed
    deep inside with KeyError: 'trainer'."""
    from omegaconf import OmegaConf

    from klear_lab.run import run_experiment

    root = Path(__file__).resolve().parents[3]
    monkeypatch.chdir(root)
    body = {"base": "experiments/quickstart/sft.yaml", "sft": {"max_steps": 7}, "run": {"seed": 0}}
    for mapping in (body, OmegaConf.create(body)):
        cfg = compose(mapping, ["run.seed=1"])
        assert (cfg["sft"]["max_steps"], cfg["run"]["seed"], cfg["run"]["name"]) == (7, 1, "quickstart-sft")
        assert cfg["run"]["experiment"] == "experiments/quickstart/sft.yaml"  # was '' (the runs table's column)
    assert body["base"] == "experiments/quickstart/sft.yaml"  # the caller's dict is left as it was
    assert compose({"base": ["experiments/quickstart/sft"]})["run"]["experiment"] == "experiments/quickstart/sft.yaml"
    assert compose({"run": {"kind": "sft"}})["run"]["experiment"] == ""  # no file to name
    with pytest.raises(ConfigError, match="python mapping: base 'nope.yaml' not found"):
        compose({"base": "nope.yaml"})
    for raw in (OmegaConf.create(body), {"run": {"kind": "sft"}}):
        with pytest.raises(ConfigError, match=r"run_experiment takes a composed config.*compose\("):
            run_experiment(raw)


def test_a_model_shape_an_init_from_run_ignores_is_warned_about(tmp_path):
    """``model.tiny.size=10m`` on an RL run that starts from ``model.init_from`` trained the 2m model it starts
    from, without a word."""
    import warnings

    rl = ROOT / "experiments/quickstart/rl.yaml"
    with pytest.warns(UserWarning, match=r"model.tiny.size \(command line\), model.tokenizer_vocab \(command line\): "
                                         r"not used: the run starts from model.init_from .*sft.yaml's model"):
        compose(rl, ["model.tiny.size=10m", "model.tokenizer_vocab=600"])
    with pytest.warns(UserWarning, match=r"^model.tiny.size \(command line\): not used"):
        compose(rl, ["model.tiny={name: qwen2, size: 10m}"])  # merged key by key: the key that changed
    saved = tmp_path / "rl_full.yaml"  # `klear-lab config` output, every default written out, run as an experiment
    saved.write_text(dump_yaml(compose(rl)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compose(rl)  # its schema-default tiny block is nobody's setting
        compose(saved)
        compose(rl, ["model.init_from=null", "model.tiny.size=10m"])  # builds that model
        compose(rl, [f"model.name_or_path={tmp_path}", "model.tiny.size=10m"])  # a resumed run's saved config


def test_a_model_shape_equal_to_the_starting_experiments_is_not_warned_about(tmp_path):
    """A shared ``base:`` that sets the RL run's ``model.tiny`` as its starting SFT experiment does builds the very
    model it starts from: no mistake, and it warned on every run. Another shape still warns."""
    import warnings

    rl, sft = ROOT / "experiments/quickstart/rl.yaml", ROOT / "experiments/quickstart/sft.yaml"
    same = tmp_path / "same.yaml"
    same.write_text(f"base: {rl}\nmodel:\n  init_from: {sft}\n  tiny: {{name: qwen2, size: 2m, num_heads: 12, "
                    "num_kv_heads: 12}\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compose(same)
    with pytest.warns(UserWarning, match=r"^model.tiny.num_kv_heads \(command line\): not used"):
        compose(same, ["model.tiny.num_kv_heads=6"])
    looped = tmp_path / "looped.yaml"  # starts from itself: training it never ended (it waited on its own lock)
    looped.write_text(f"base: {rl}\nmodel:\n  init_from: {looped}\n")
    with pytest.raises(ConfigError, match=r"model.init_from: a circular chain of starting experiments: "
                                          r"\S*looped.yaml -> \S*looped.yaml"):
        compose(looped)
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text(f"base: {rl}\nmodel:\n  init_from: {b}\n")
    b.write_text(f"base: {rl}\nmodel:\n  init_from: {a}\n")
    with pytest.raises(ConfigError, match=r"circular chain of starting experiments: "
                                          r"\S*b.yaml -> \S*a.yaml -> \S*b.yaml"):
        compose(a)


def test_threads_composing_the_same_starting_experiment_at_once_see_no_circular_chain(monkeypatch):
    """The chain being composed is per thread: two threads composing the RL experiment at once (a notebook's
    pool; a sweep's test) read each other's as one that comes back to itself."""
    import threading

    from klear_lab.config import compose as compose_module

    rl = ROOT / "experiments/quickstart/rl.yaml"
    inside, other_done, errors = threading.Event(), threading.Event(), []
    real = compose_module.compose

    def compose_slowly(path, *args, **kwargs):  # the starting experiment's compose, held until the other is done
        if threading.current_thread().name == "first" and str(path).endswith("sft.yaml"):
            inside.set()
            other_done.wait(30)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(compose_module, "compose", compose_slowly)

    def first() -> None:
        try:
            real(rl)
        except ConfigError as exc:
            errors.append(exc)

    thread = threading.Thread(target=first, name="first", daemon=True)
    thread.start()
    assert inside.wait(30)
    try:
        real(rl)  # composes sft.yaml while the first thread is inside it
    finally:
        other_done.set()
        thread.join(30)
    assert not errors


def test_a_list_given_as_one_mapping_in_a_file_says_a_list_is_expected(tmp_path):
    """``data: {sources: {name: arith}}`` said "data.sources.name: not an index", as if an index was typed."""
    exp = tmp_path / "exp.yaml"
    exp.write_text(f"base: {ROOT / 'experiments/quickstart/rl.yaml'}\ndata: {{sources: {{name: arith}}}}\n")
    with pytest.raises(ConfigError) as err:
        compose(exp)
    assert str(err.value).startswith(f"{exp}: data.sources: a mapping (name) where a list is expected")


def test_a_component_name_of_the_wrong_type_names_where_it_was_set(tmp_path):
    """``rl: {clip: {name: 5}}`` in a file, or ``rl.clip.name=5``, was blamed on "schema defaults"."""
    exp = tmp_path / "exp.yaml"
    exp.write_text(f"base: {ROOT / 'experiments/quickstart/rl.yaml'}\nrl: {{clip: {{name: 5}}}}\n")
    with pytest.raises(ConfigError, match=rf"^{exp}: rl.clip must be a clip component"):
        compose(exp)
    with pytest.raises(ConfigError, match=r"^command line: rl.clip must be a clip component"):
        compose(ROOT / "experiments/quickstart/rl.yaml", ["rl.clip.name=5"])
