"""A sweep's checks probe every RL component its trials would call, as a run and ``--dry-run`` do: a group filter
that returned a mask per completion, say, was found by each trial as it started (a config error, each trial
failed alike), and ``sweep --validate-only`` said OK."""

from __future__ import annotations

import pytest
import yaml
from sweep_fixtures import write_spec

from klear_lab.errors import ConfigError
from klear_lab.sweep.checks import check_spec
from klear_lab.sweep.spec import load_spec

pytestmark = pytest.mark.usefixtures("registries_restored")

FILTERS = """
from dataclasses import dataclass
from klear_lab.registry import GROUP_FILTER

@GROUP_FILTER.register("probe_test_per_completion")
@dataclass(frozen=True)
class PerCompletion:
    \"\"\"Test plugin: a mask per completion, not one flag per group.\"\"\"

    def __call__(self, scores, acc):
        return acc
"""


def _rl_spec(tmp_path, axes: dict, base_filter: str = "none"):
    (tmp_path / "filters.py").write_text(FILTERS)
    path = write_spec(tmp_path)
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump({
        "run": {"name": "toy", "kind": "rl"}, "plugins": [str(tmp_path / "filters.py")],
        "rl": {"group_filter": {"name": base_filter}}}))
    body = yaml.safe_load(path.read_text())
    body.update(axes=axes, metrics=["reward/mean"])
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def test_an_axis_value_whose_component_breaks_its_contract_is_named(tmp_path):
    path = _rl_spec(tmp_path, {"rl.group_filter.name": ["none", "probe_test_per_completion"]})
    with pytest.raises(ConfigError) as err:
        check_spec(load_spec(path))
    said = str(err.value)
    assert "axes.rl.group_filter.name: value 'probe_test_per_completion'" in said, said
    assert "rl.group_filter: group_filter 'probe_test_per_completion'" in said and "shape (3, 4)" in said, said


def test_a_base_whose_component_breaks_its_contract_is_the_bases_fault(tmp_path):
    path = _rl_spec(tmp_path, {"optim.lr": [0.001, 0.002]}, base_filter="probe_test_per_completion")
    with pytest.raises(ConfigError, match=r"base experiment: every trial would stop before training: "
                                          r"rl.group_filter: group_filter 'probe_test_per_completion'"):
        check_spec(load_spec(path))
    assert len(check_spec(load_spec(_rl_spec(tmp_path, {"optim.lr": [0.001, 0.002]})))) == 2
