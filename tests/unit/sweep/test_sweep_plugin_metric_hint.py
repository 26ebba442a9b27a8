"""A misspelt plugin clip statistic in a sweep spec gets a did-you-mean naming the plugin's own name (one test:
a plugin file registers its name once per process, so a second test's copy elsewhere would be refused)."""

from __future__ import annotations

import pytest
import yaml
from sweep_fixtures import write_spec

from klear_lab.errors import ConfigError
from klear_lab.registry import CLIP, REGISTRIES
from klear_lab.sweep.checks import check_spec
from klear_lab.sweep.spec import DEFAULT_RUNNER, load_spec

HINT_CLIP = '''
from dataclasses import dataclass
import torch
from klear_lab.registry import CLIP
from klear_lab.rl.clip.base import ClipOutput

@CLIP.register("hint_clip")
@dataclass(frozen=True)
class HintClip:
    """Test plugin: REINFORCE logging a statistic of its own."""
    scale: float = 1.0
    def __call__(self, logp, old_logp, adv, mask):
        ratio = torch.exp(logp - old_logp)
        return ClipOutput(loss=-adv[:, None] * ratio * mask * self.scale,
                          metrics={"my_clip_frac": (ratio > 1.2).float().mean().detach()})
'''


@pytest.fixture(autouse=True)
def only_shipped_clips():
    """The check asks every registered clip its statistics and, where one cannot be asked, checks ``rl/`` names
    by namespace alone: a clip another test left registered in this worker (one that raises) hid the hint."""
    for registry in REGISTRIES.values():
        registry.load_builtins()
    before = CLIP.snapshot()
    CLIP.restore({name: cls for name, cls in before.items() if cls.__module__.startswith("klear_lab.")})
    yield
    CLIP.restore({**before, **CLIP.snapshot()})


def _rl_spec_with_plugin(tmp_path, **changes):
    (tmp_path / "hint_clip.py").write_text(HINT_CLIP)
    path = write_spec(tmp_path)
    (tmp_path / "exp.yaml").write_text(f"run: {{name: toy, kind: rl}}\nplugins: [{tmp_path / 'hint_clip.py'}]\n"
                                       "rl: {clip: {name: hint_clip}}\n")
    body = {**yaml.safe_load(path.read_text()), "runner": DEFAULT_RUNNER, **changes}
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def _error(path) -> str:
    with pytest.raises(ConfigError) as exc:
        check_spec(load_spec(path))
    return str(exc.value)


def test_a_misspelt_plugin_metric_gets_the_plugins_name_as_its_did_you_mean(tmp_path):
    """The hint was chosen from the built-in rl/ names only: 'rl/my_clip_fracc' got 'rl/clip_frac'."""
    assert len(check_spec(load_spec(_rl_spec_with_plugin(tmp_path, metrics=["rl/my_clip_frac"])))) == 3
    msg = _error(_rl_spec_with_plugin(tmp_path, metrics=["train/loss", "rl/my_clip_fracc"]))
    assert "metrics[1]: 'rl/my_clip_fracc' is not a metric rl runs log (did you mean 'rl/my_clip_frac'?)" in msg
    assert "rl/my_clip_frac" in msg.split("they log under rl/: ")[1]  # listed with the built-in rl/ names
    msg = _error(_rl_spec_with_plugin(tmp_path, objective={"metric": "rl/my_clip_fracc", "direction": "minimize"}))
    assert "objective.metric: 'rl/my_clip_fracc' is not a metric rl runs log (did you mean 'rl/my_clip_frac'?)" in msg
    msg = _error(_rl_spec_with_plugin(tmp_path, metrics=["rl/reward_mean"]))  # a built-in's near miss: as before
    assert "'rl/reward_mean' is not a metric rl runs log (did you mean 'reward/mean'?)" in msg

