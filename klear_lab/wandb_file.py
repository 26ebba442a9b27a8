"""Read a W&B run file (``<run dir>/wandb/*run-*/run-*.wandb``): what W&B itself recorded for a run.

The file is W&B's transaction log: a 7-byte header (``:W&B``, magic, version), then LevelDB-log
blocks of 32 KiB holding records (crc32 4 bytes, length 2 bytes, type 1 byte: 1 full, 2 first,
3 middle, 4 last; a block's last < 7 bytes are padding), each a ``wandb_internal_pb2.Record`` (the
protobuf W&B ships). A killed run's file ends where W&B last flushed it: reading stops at the first
record that is cut short. Used by a resume (what W&B already holds) and by tests.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from wandb.proto import wandb_internal_pb2 as pb

BLOCK, HEADER = 32 * 1024, 7


def records(path: Path) -> list[bytes]:
    """The serialized records of the run file at ``path`` (none when it is not a W&B run file)."""
    data = path.read_bytes()
    if data[:4] != b":W&B":
        return []
    out, pos, parts = [], HEADER, b""
    while pos + HEADER <= len(data):
        room = BLOCK - pos % BLOCK
        if room < HEADER:  # padding to the block's end
            pos += room
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + HEADER])
        chunk = data[pos + HEADER:pos + HEADER + length]
        pos += HEADER + length
        if kind not in (1, 2, 3, 4) or len(chunk) < length:  # zero-filled or cut short: the end
            break
        parts = chunk if kind in (1, 2) else parts + chunk
        if kind in (1, 4):
            out.append(parts)
    return out


def history(path: Path) -> list[dict[str, Any]]:
    """The run's history rows in logging order, ``{key: value}`` (keys of nested items joined by ``/``)."""
    return [{item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            for record in _parsed(path) if record.WhichOneof("record_type") == "history"]


def _parsed(path: Path) -> list[Any]:
    out = []
    for raw in records(path):
        record = pb.Record()
        try:
            record.ParseFromString(raw)
        except Exception:  # noqa: BLE001 - protobuf's DecodeError: a record cut short
            break
        out.append(record)
    return out


def run_info(path: Path) -> dict[str, Any]:
    """The run record: group, job type, tags and config (``{key: value}``, top-level keys)."""
    run = next(r.run for r in _parsed(path) if r.WhichOneof("record_type") == "run")
    return {"group": run.run_group, "job_type": run.job_type, "tags": list(run.tags),
            "config": {item.key: json.loads(item.value_json) for item in run.config.update}}


def summary(path: Path) -> dict[str, Any]:
    """The run summary as W&B holds it at the end: every summary update applied in order."""
    out: dict[str, Any] = {}
    for record in _parsed(path):
        if record.WhichOneof("record_type") == "summary":
            out.update({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                        for item in record.summary.update})
    return out
