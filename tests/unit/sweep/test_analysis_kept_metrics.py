"""An analysis entry may compare a benchmark on any final metric a ``run_experiment`` trial keeps (every metric its run
returns, ``sweep/trial.py``), not only the sweep's objective and ``metrics:``: Figure 2's embedded entry reads
``val/acc_last5``, the paper's mean of the last 5 evaluations, which the quickstart sweep does not list."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from sweep_fixtures import write_spec

from klear_lab.analysis.reproduce import reproduce
from klear_lab.analysis.spec import load_analysis
from klear_lab.errors import ConfigError
from klear_lab.sweep.compare import TrialRecord
from klear_lab.sweep.spec import DEFAULT_RUNNER, load_spec

QUICKSTART_ARMS = ("clip=ppo", "clip=clip_higher", "clip=gppo", "clip=cispo")


def toy_analysis(tmp: Path, kind: str, metric: str) -> Path:
    """A one-benchmark analysis of the toy lr sweep (run by ``run_experiment``, runs of ``kind``) mapping its
    benchmark to ``metric``."""
    write_spec(tmp, seeds=(0, 1), runner=DEFAULT_RUNNER, metrics=["val/gain"])
    (tmp / "exp.yaml").write_text(f"run: {{name: toy, kind: {kind}}}\n")
    body = {"title": "Toy", "benchmarks": ["A"], "paper": {"0.001": [1.0], "0.002": [2.0]}, "baseline": "0.001",
            "claims": [{"better": "0.002", "than": "0.001"}],
            "sweeps": [{"spec": "toy.yaml", "metrics": {"A": metric}}]}
    path = tmp / "toy_analysis.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def test_a_final_metric_an_rl_run_returns_may_be_mapped_though_the_sweep_does_not_list_it(tmp_path):
    analysis = load_analysis(toy_analysis(tmp_path, "rl", "val/acc_last5"))
    assert analysis.sweeps[0].metrics == {"A": "val/acc_last5"}


@pytest.mark.parametrize(("kind", "metric", "said"), [
    ("sft", "val/acc_last5", r"is not a metric sft runs log \(only rl runs do\)"),  # no RL curve summary
    ("rl", "val/acc_lastt5", r"is not a metric rl runs log \(did you mean 'val/acc_last5'\?\)"),  # none logs it
])
def test_a_metric_the_runs_do_not_log_is_refused_saying_so(tmp_path, kind, metric, said):
    path = toy_analysis(tmp_path, kind, metric)
    with pytest.raises(ConfigError, match=f"sweeps\\[0\\].metrics.A: toy.yaml: '{metric}' {said}"):
        load_analysis(path)


@pytest.mark.parametrize("metric", ["val/no_such_source/acc_last5",  # per source: only under the spec's labels
                                    "val/arith/acc_last5",           # and only with two held-out sources
                                    "val/pass_at_k", "val/level7/acc"])  # logged by some runs only
def test_a_metric_only_some_runs_log_must_be_in_the_sweeps_metrics(tmp_path, metric):
    """A mistyped source label (``aime_24``) was accepted, then compared nothing once the sweep had run."""
    path = toy_analysis(tmp_path, "rl", metric)
    with pytest.raises(ConfigError, match=f"toy.yaml may not record '{metric}' in every trial .*add it to that "
                                          "sweep's"):
        load_analysis(path)


@pytest.mark.parametrize(("kind", "metric"), [("rl", "train/steps"), ("sft", "perf/train_seconds"),
                                              ("sft", "data/records"), ("rl", "val/acc_macro")])
def test_a_metric_every_run_of_the_kind_returns_may_be_mapped(tmp_path, kind, metric):
    """Every trial keeps every final metric its run returns: a mapping of these was accepted before."""
    assert load_analysis(toy_analysis(tmp_path, kind, metric)).sweeps[0].metrics == {"A": metric}


def test_fig2s_embedded_entry_compares_the_mean_of_the_last_evaluations(repo_root):
    """The accuracy claims stay on the objective, the final val/acc; the AIME24 column reads val/acc_last5, and
    the stability claim val/acc_drawdown, lower being better (every RL run returns it)."""
    analysis = load_analysis(Path(repo_root, "analysis", "fig2_clip.yaml"))
    ref = next(r for r in analysis.sweeps if r.spec_path.name == "quickstart.yaml")
    assert ref.metrics == {"AIME24 avg@32": "val/acc_last5", "stability (drawdown)": "val/acc_drawdown"}
    assert ref.direction("stability (drawdown)") == "lower" and ref.direction("AIME24 avg@32") == "higher"
    last5 = {"clip=ppo": 0.50, "clip=clip_higher": 0.60, "clip=gppo": 0.70, "clip=cispo": 0.65}
    fall = {"clip=ppo": 0.05, "clip=clip_higher": 0.05, "clip=gppo": 0.01, "clip=cispo": 0.05}  # gppo steadier
    recs = [TrialRecord(arm, seed, "COMPLETE", {"val/acc": 0.9 + seed / 100, "val/acc_last5": last5[arm] + seed / 100,
                                                "val/acc_drawdown": fall[arm] + seed / 1000})
            for arm in QUICKSTART_ARMS for seed in (0, 1)]
    rep = reproduce(analysis, ref, load_spec(ref.spec_path), recs)
    arms = rep.arms.set_index("arm")
    assert arms.loc["gppo", "ours AIME24 avg@32 mean"] == pytest.approx(0.705)
    assert arms.loc["gppo", "ours mean"] == pytest.approx(0.905)             # the objective: the final val/acc
    claims = rep.claims.set_index("claim")
    assert list(claims.index) == ["GPPO beats GRPO with clip-higher", "GPPO ends above CISPO",
                                  "GPPO is more stable than CISPO"]
    assert claims["metric"].tolist() == ["val/acc", "val/acc", "val/acc_drawdown"]
    stable = claims.loc["GPPO is more stable than CISPO"]
    assert stable["ours Δ"] == pytest.approx(-0.04) and stable["verdict"] == "reproduced"  # a fall 0.04 smaller
    benches = rep.benchmarks
    assert list(zip(benches["claim"], benches["metric"], benches["direction"], strict=True)) == [
        ("GPPO beats GRPO with clip-higher", "val/acc_last5", "higher"),
        ("GPPO ends above CISPO", "val/acc_last5", "higher"),
        ("GPPO is more stable than CISPO", "val/acc_drawdown", "lower")]   # no accuracy claim on the drawdown
    assert benches.set_index("than").loc["clip_higher", "ours Δ"] == pytest.approx(0.10)


def test_a_shrunk_copy_of_the_quickstart_keeps_the_mapping(tmp_path, repo_root):
    """A sweep the analysis does not list takes its donor's `metrics:` entries that it keeps."""
    from klear_lab.analysis import _ref_for

    body = yaml.safe_load(Path(repo_root, "sweeps", "quickstart.yaml").read_text())
    body |= {"experiment": str(Path(repo_root, "experiments", "quickstart", "rl.yaml")),
             "axes": {"rl.clip.name": ["clip_higher", "gppo"]}, "baseline": {"rl.clip.name": "clip_higher"}}
    copy = tmp_path / "mine.yaml"
    copy.write_text(yaml.safe_dump(body, sort_keys=False))
    ref = _ref_for(load_analysis(Path(repo_root, "analysis", "fig2_clip.yaml")), load_spec(copy), copy)
    assert ref.spec_path == copy and ref.metrics == {"AIME24 avg@32": "val/acc_last5",
                                                     "stability (drawdown)": "val/acc_drawdown"}
    assert ref.direction("stability (drawdown)") == "lower"  # its direction comes along
