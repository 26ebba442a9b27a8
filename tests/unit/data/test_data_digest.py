"""``records_digest``: what ``run.json`` keeps of the records a run read, so a resume can refuse edited data."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

from klear_lab.data.records import Record, data_digests, records_digest

A = Record(uid="s/0", source="s", task="math", prompt="1+1", answer="2", response="<think>1+1</think>2")
B = Record(uid="s/1", source="s", task="code", prompt="f", answer="def f(): pass",
           tests=({"input": [1], "output": 2},), meta={"test_timeout_s": 2.0})


def test_every_field_and_the_order_count():
    base = records_digest([A, B])
    assert len(base) == 16 and base == records_digest([A, B])
    changed = [
        [B, A],  # order: an SFT run's data position and RL's prompt batches follow it
        [replace(A, response="<think>1+1</think>3"), B],
        [A, replace(B, tests=({"input": [1], "output": 3},))],
        [A, replace(B, meta={"test_timeout_s": 3.0})],  # meta is left out of Record equality, not of the digest
        [A],
        [A, B, A],
    ]
    assert len({base, *map(records_digest, changed)}) == len(changed) + 1


def test_no_field_can_pass_for_the_next():
    """Texts are hashed raw, each behind its length: "ab" + "c" is not "a" + "bc", nor an unset response ""."""
    split_one, split_two = replace(A, prompt="ab", answer="c"), replace(A, prompt="a", answer="bc")
    assert records_digest([split_one]) != records_digest([split_two])
    assert records_digest([replace(A, response=None)]) != records_digest([replace(A, response="")])


def test_the_digest_is_the_same_in_another_process():
    """Not Python's salted ``hash``: a resume in a new process compares against the start's digest, also for
    a plugin source's ``meta`` holding a set (iterated in hash order) or keys of mixed types."""
    import os

    code = ("from klear_lab.data.records import Record, records_digest; "
            "print(records_digest([Record(uid='s/0', source='s', task='math', prompt='1+1', answer='2', "
            "response='<think>1+1</think>2', meta={'tags': {'x', 'y', 'alpha', 'beta', 'gamma'}, 1: 'one', 'b': 2})]))")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout.strip() for seed in ("1", "2", "3")}
    assert len(outs) == 1 and len(outs.pop()) == 16
    plain = ("from klear_lab.data.records import Record, records_digest; "
             "print(records_digest([Record(uid='s/0', source='s', task='math', prompt='1+1', answer='2', "
             "response='<think>1+1</think>2')]))")
    out = subprocess.run([sys.executable, "-c", plain], capture_output=True, text=True, check=True).stdout.strip()
    assert out == records_digest([A])


def test_an_eval_run_keeps_only_held_out_digests():
    assert set(data_digests(None, [A])) == {"eval"}
    assert data_digests([A], [B]) == {"train": records_digest([A]), "eval": records_digest([B])}
