"""Sweep throughput: the same small grid with 1 worker (2 threads/trial) and 2 workers (1 thread/trial).

    python scripts/bench_sweep_workers.py                     # real quickstart SFT trials (tiny)
    python scripts/bench_sweep_workers.py --runner rl         # short quickstart RL trials (--steps rollout steps)
    python scripts/bench_sweep_workers.py --runner quickstart --repeats 1  # sweeps/quickstart.yaml's own 8 trials
    python scripts/bench_sweep_workers.py --runner synthetic  # torch MLP training trials, no data/model
    python scripts/bench_sweep_workers.py --cores 2 --arms 4 --steps 20

    python scripts/bench_sweep_workers.py --trial-start fresh     # a new interpreter per trial
    python scripts/bench_sweep_workers.py --trial-start both      # both ways, interleaved

Each configuration runs a fresh study (SQLite) in its own sweep process through the real sweep
machinery: enqueue, worker threads, one process per trial with OMP_NUM_THREADS = cores // workers,
forked from the preloaded server (``trial_start: preloaded``, the default; its start is timed)
or a fresh interpreter. Reported: trials/s of the worker phase (validation and imports of the sweep
process excluded), the same in steady state (each worker's first trial left out: it also waits for
the preloaded server) and the 2-vs-1 ratios (target >= 1.8x on 2 cores). ``--cores`` pins this process
(and its trials) to the first N CPUs. SIGTERM stops the running sweep process (its trials with it) and
removes the temporary directory, as Ctrl-C does.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from bench_args import cpu_count, positive, usable_cpus

HERE = Path(__file__).resolve()
REPO = HERE.parents[1]
TINY_SFT = ["data.sources.0.n_prompts=400", "data.eval_sources.0.n_prompts=16", "eval.max_new_tokens=32",
            "trainer.checkpoint=false", "sft.tokens_per_micro_batch=1000"]
QUICKSTART = REPO / "sweeps" / "quickstart.yaml"
SHORT_RL = ["data.eval_sources.0.n_prompts=100", "rl.eval_every=0", "trainer.checkpoint=false"]
STOP_GRACE_S = 30  # a stopped sweep process's time to stop its trials (their own grace: TRIAL_GRACE_S) and exit
TRIAL_GRACE_S = "20"  # KLEAR_SWEEP_TERM_GRACE_S of the sweep processes, unless set (the sweep's default is 120 s)


def synthetic(cfg: dict, callbacks: list | None = None) -> dict:
    """A CPU-bound stand-in trial: train a small MLP for ``sft.max_steps`` steps."""
    import torch

    threads = cfg["trainer"]["num_threads"] or int(os.environ.get("OMP_NUM_THREADS", "1"))
    torch.set_num_threads(threads)
    torch.manual_seed(cfg["run"]["seed"])
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256))
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["optim"]["lr"])
    x = torch.randn(256, 256)
    for _ in range(max(cfg["sft"]["max_steps"], 1) * 10):
        loss = (model(x) - x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    run_dir = Path(cfg["run"]["out_dir"]) / f"{cfg['run']['name']}-{os.getpid()}"
    run_dir.mkdir(parents=True, exist_ok=True)
    return {"run_dir": run_dir, "metrics": {"val/acc": -float(loss), "train/loss": float(loss)}}


def sft_model_for_rl() -> str:
    """The quickstart SFT model the RL trials start from (trained once under ./runs if missing)."""
    from klear_lab import starting_point
    from klear_lab.config.compose import compose

    cfg = compose(REPO / "experiments" / "quickstart" / "rl.yaml")
    starting_point.resolve_init_from(cfg)
    return str(Path(cfg["model"]["name_or_path"]).resolve())


def write_spec(tmp: Path, name: str, args: argparse.Namespace, workers: int, pin_threads: int = 0,
               trial_start: str = "preloaded") -> Path:
    lrs = [round(1e-3 * (i + 1), 6) for i in range(args.arms)]
    experiment, overrides = "sft.yaml", [*TINY_SFT, f"sft.max_steps={args.steps}"]
    if args.runner == "rl":
        lrs = [round(1e-5 * (i + 1), 8) for i in range(args.arms)]
        experiment, overrides = "rl.yaml", [*SHORT_RL, f"rl.steps={args.steps}", f"model.name_or_path={args.sft}"]
    axes, seeds = {"optim.lr": lrs}, [0]
    if args.runner == "quickstart":  # the shipped sweep's own trials, from the same starting point
        shipped = yaml.safe_load(QUICKSTART.read_text())
        experiment, axes, seeds = "rl.yaml", shipped["axes"], shipped["seeds"]
        overrides = [*shipped["overrides"], f"model.name_or_path={args.sft}"]
    if pin_threads:
        overrides.append(f"trainer.num_threads={pin_threads}")
    spec = {"name": name, "experiment": str(REPO / "experiments" / "quickstart" / experiment),
            "overrides": overrides, "axes": axes,
            "seeds": seeds, "objective": {"metric": "val/acc", "direction": "maximize"},
            "workers": workers, "out_dir": str(tmp / "out"), "heartbeat_interval": 10,
            "trial_start": trial_start}
    if args.runner == "synthetic":
        spec["runner"] = f"{HERE}:synthetic"
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def run_one(spec_path: Path, workers: int) -> tuple[float, int, int, float]:
    """(worker-phase seconds, trials completed, threads per trial, steady trials/s), in a new process. Interrupted
    (SIGTERM: :func:`exit_on_sigterm`, or Ctrl-C), it stops that process and its trials before it returns."""
    with subprocess.Popen([sys.executable, str(HERE), "--one", str(spec_path), str(workers)],
                          stdout=subprocess.PIPE, text=True) as child:
        try:
            out, _ = child.communicate()
        except BaseException:
            stop_sweep_process(child)
            raise
    if child.returncode:
        sys.exit(f"the sweep process of {spec_path.stem} failed (exit {child.returncode}); its output is above")
    return tuple(json.loads(out.strip().splitlines()[-1]))


def stop_sweep_process(child: subprocess.Popen) -> None:
    """SIGTERM a sweep process (it stops its trials: ``klear_lab/sweep/terminate.py``) and wait for it; SIGKILL
    it after :data:`STOP_GRACE_S` (its trials die with it: ``trial.die_with``)."""
    if child.poll() is None:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def exit_on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM handler of the script: exit as Ctrl-C would, through the ``with`` blocks, so the sweep process is
    stopped (:func:`run_one`) and the temporary directory removed. The default action left both behind."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the clean-up short
    print("bench_sweep_workers: SIGTERM: stopping the sweep process and removing its files", file=sys.stderr,
          flush=True)
    raise SystemExit(128 + signum)


def steady_rate(trials: list, workers: int) -> float:
    """workers / median trial seconds, leaving out each worker's first trial (server start, warm caches)."""
    done = sorted((t for t in trials if t.state.name == "COMPLETE"), key=lambda t: t.datetime_start)
    later = [(t.datetime_complete - t.datetime_start).total_seconds() for t in done[workers:]]
    return workers / statistics.median(later) if later else float("nan")


def one_sweep(spec_path: Path, workers: int) -> None:
    """The measured part of :func:`run_one`: prints [seconds, trials completed, threads, steady] last."""
    import optuna

    from klear_lab.config.compose import compose
    from klear_lab.sweep import launcher
    from klear_lab.sweep.checks import check_spec
    from klear_lab.sweep.launch import freeze_spec
    from klear_lab.sweep.queue import count, prepare_study
    from klear_lab.sweep.spec import load_spec
    from klear_lab.sweep.storage import StudyLock, default_storage_url, open_study
    from klear_lab.sweep.terminate import SweepTerminated
    from klear_lab.sweep.worker import WorkerContext, run_workers, threads_per_trial

    spec = load_spec(spec_path)
    arms = check_spec(spec)
    url = default_storage_url(spec)
    frozen = freeze_spec(spec, url)
    study = open_study(spec, url, create=True)
    prepare_study(study, spec, arms, StudyLock(url, spec.name))
    threads = threads_per_trial(workers, compose(spec.experiment, spec.overrides)["trainer"]["num_threads"])
    ctx = WorkerContext(spec, url, frozen, workers, threads,
                        log=lambda line: print("   ", line, file=sys.stderr, flush=True))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    start = time.perf_counter()
    launcher.warm_up(spec.trial_start, spec.runner)  # a sweep starts its preloaded server here too
    try:
        run_workers(ctx)
    except SweepTerminated:  # SIGTERM (from run_one's stop_sweep_process): the trials are stopped
        sys.exit(128 + signal.SIGTERM)
    seconds = time.perf_counter() - start
    done = count(study, (optuna.trial.TrialState.COMPLETE,))
    print(json.dumps([seconds, done, threads or 0, steady_rate(study.get_trials(), workers)]), flush=True)


def print_summary(title: str, rates: list[list[float]], repeats: int, cores: int) -> None:
    """Medians of (1 worker, 2 workers, 1 worker x 1 thread) trials/s and the ratios between them."""
    one, two, single = (statistics.median(r) for r in rates)
    print(f"\n{title}, medians over {repeats} round(s)\n"
          f"1 worker  ({cores} threads/trial): {one:.4f} trials/s\n"
          f"2 workers (1 thread/trial) : {two:.4f} trials/s\n"
          f"1 worker  (1 thread/trial) : {single:.4f} trials/s\n"
          f"ratio 2 workers / 1 worker          : {two / one:.2f}x (target >= 1.8x)\n"
          f"parallel efficiency (same threads)  : {two / single:.2f}x of 2.0\n"
          f"one trial's speed-up from {cores} threads : {one / single:.2f}x (the ratio's ceiling is 2 / this)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runner", choices=["real", "rl", "quickstart", "synthetic"], default="real")
    parser.add_argument("--arms", type=positive, default=4,
                        help="grid size (optim.lr values, 1 seed; not for quickstart)")
    parser.add_argument("--steps", type=positive, default=20, help="optimizer steps (rl: rollout steps) per trial")
    parser.add_argument("--repeats", type=positive, default=3, help="interleaved rounds; medians are reported")
    parser.add_argument("--cores", type=cpu_count, default=min(2, usable_cpus()),
                        help="pin to the first N CPUs (0 = no pinning; default 2, or 1 on a 1-CPU machine)")
    parser.add_argument("--trial-start", choices=["preloaded", "fresh", "both"], default="preloaded",
                        help="how trials start; both = every configuration each way, interleaved")
    parser.add_argument("--one", nargs=2, metavar=("SPEC", "WORKERS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        one_sweep(Path(args.one[0]), int(args.one[1]))
        return 0
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    os.environ.setdefault("KLEAR_SWEEP_TERM_GRACE_S", TRIAL_GRACE_S)
    if args.cores:
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[: args.cores])
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("WANDB_MODE", "offline")
    from klear_lab.hardware import cpu_cores

    cores = cpu_cores()
    args.sft = sft_model_for_rl() if args.runner in ("rl", "quickstart") else None
    results: dict[str, list[float]] = {}
    steady: dict[str, list[float]] = {}
    starts = ["preloaded", "fresh"] if args.trial_start == "both" else [args.trial_start]
    # (label, workers, threads pinned per trial; 0 = cores // workers as a sweep does)
    configs = [("1 worker", 1, 0), ("2 workers", 2, 0), ("1 worker, 1 thread", 1, 1)]
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as tmp:
        for rep in range(args.repeats):  # interleaved, so a slow spell of the machine hits every config
            for start in starts:
                for label, workers, pin in configs:
                    name = f"bench_{start}_w{workers}_t{pin}_r{rep}"
                    spec = write_spec(Path(tmp), name, args, workers, pin, start)
                    print(f"== {label} on {cores} core(s) ({args.runner} trials, {start}), "
                          f"round {rep + 1}", flush=True)
                    seconds, done, threads, rate = run_one(spec, workers)
                    results.setdefault(f"{start}: {label}", []).append(done / seconds)
                    steady.setdefault(f"{start}: {label}", []).append(rate)
                    print(f"   {done} trials in {seconds:.1f}s, {threads or pin} thread(s)/trial: "
                          f"{done / seconds:.4f} trials/s (steady state {rate:.4f})", flush=True)
    for label, rates in results.items():
        print(f"{label:30s}: " + "  ".join(f"{r:.4f}" for r in rates) + " trials/s")
    for start in starts:
        for title, table in (("whole worker phase", results),
                             ("steady state (each worker's first trial left out)", steady)):
            print_summary(f"{start} trials, {title}", [table[f"{start}: {k}"] for k, _, _ in configs],
                          args.repeats, cores)
    return 0


if __name__ == "__main__":
    sys.exit(main())
