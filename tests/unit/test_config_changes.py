"""What a refused resume says changed: leaves of two configs compared by dotted key."""

from __future__ import annotations

from klear_lab.resume_checkpoint import config_changes


def test_changed_added_and_removed_leaves_are_named_in_key_order():
    before = {"optim": {"lr": 1e-3, "betas": [0.9, 0.95]}, "rl": {"clip": {"name": "gppo"}}, "old": 1}
    after = {"optim": {"lr": 0.1, "betas": [0.9, 0.99]}, "rl": {"clip": {"name": "gppo", "eps": 0.2}}}
    assert config_changes(before, after) == ("old: 1 -> (unset); optim.betas: [0.9, 0.95] -> [0.9, 0.99]; "
                                             "optim.lr: 0.001 -> 0.1; rl.clip.eps: (unset) -> 0.2")
    assert config_changes(before, before) == ""


def test_many_changes_are_cut_to_the_limit_and_long_values_shortened():
    before = {f"k{i}": i for i in range(8)} | {"text": "a" * 200}
    after = {f"k{i}": -i for i in range(8)} | {"text": "b" * 200}
    said = config_changes(before, after, limit=3)
    assert said.startswith("k1: 1 -> -1; k2: 2 -> -2; k3: 3 -> -3; and 5 more")
    assert len(config_changes({"t": "a" * 200}, {"t": "b"})) < 100


def test_an_empty_list_or_mapping_reads_as_itself_and_adds_no_row_beside_its_filled_keys():
    """``plugins: []`` against a plugin list read "(unset)"; an emptied mapping or list of mappings is said by the
    keys under it, not by a row of its own as well."""
    before = {"plugins": [], "data": {"fields": {}, "sources": []}, "eval": {"sets": []}}
    after = {"plugins": ["a.py"], "data": {"fields": {"prompt": "q"}, "sources": [{"name": "arith"}]}, "eval": {}}
    assert config_changes(before, after) == ('data.fields.prompt: (unset) -> "q"; data.sources.0.name: (unset) -> '
                                             '"arith"; eval.sets: [] -> (unset); plugins: [] -> ["a.py"]')
    assert config_changes({"x": {}}, {"x": []}) == "x: {} -> []"
