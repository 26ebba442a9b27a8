"""A trial killed by its sweep's Ctrl-C left tqdm's semaphore registered with the sweep's resource tracker."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# a forkserver child (as the sweep starts trials) writes a tqdm bar, as saving a model does, and is SIGKILLed
KILLED_TRIAL = textwrap.dedent("""
    import multiprocessing, os, sys, time

    def trial(lock_first, written):
        if lock_first:
            from klear_lab.sweep.trial import progress_bars_without_a_semaphore
            progress_bars_without_a_semaphore()
        from tqdm import tqdm
        for _ in tqdm(range(2)):
            pass
        open(written, "w").close()
        time.sleep(60)

    if __name__ == "__main__":
        how, written = sys.argv[1:]
        proc = multiprocessing.get_context("forkserver").Process(target=trial, args=(how == "locked", written))
        proc.start()
        deadline = time.time() + 60
        while not os.path.exists(written) and time.time() < deadline:
            time.sleep(0.1)
        proc.kill()
        proc.join()
""")



@pytest.mark.parametrize("how", ["locked", "default"])
def test_a_killed_trial_leaks_no_semaphore(tmp_path, how):
    script = tmp_path / "killed_trial.py"
    script.write_text(KILLED_TRIAL)
    written = tmp_path / "bar_written"
    done = subprocess.run([sys.executable, str(script), how, str(written)], capture_output=True, text=True,
                          timeout=120)
    assert written.exists(), done.stderr[-2000:]
    leaked = "leaked semaphore" in done.stderr  # the resource tracker's warning, once the sweep process exits
    assert leaked == (how == "default"), done.stderr[-2000:]  # tqdm's own lock leaks: the check can fail
