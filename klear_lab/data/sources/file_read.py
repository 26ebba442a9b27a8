"""Reading a data file's rows for :class:`klear_lab.data.sources.file.FileSource` (registers nothing): JSON lines,
a JSON array, parquet, a ``datasets.save_to_disk`` directory or a hub id, with errors that name the file and row."""

from __future__ import annotations

import codecs
import json
import re
from pathlib import Path
from typing import Any

from klear_lab.errors import DataError, hub_offline, load_error

_HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")


def read_rows(path: str, split: str = "train") -> list[tuple[int, Any]]:
    """(1-based row number, row) pairs; JSON lines count physical lines. ``split`` picks a saved
    ``DatasetDict``'s split (:func:`_one_split`). Raises DataError."""
    p = Path(path).expanduser()  # ~/data/x.jsonl in a YAML file: no shell expands it
    if p.is_dir():
        return list(enumerate(_load_hf(str(p), from_disk=True, split=split), 1))
    if p.is_file():
        _refuse_compressed(p)
        if p.suffix.lower() == ".parquet":
            import pyarrow.parquet as pq

            try:
                return list(enumerate(pq.read_table(p).to_pylist(), 1))
            except Exception as exc:  # noqa: BLE001 - any pyarrow failure is a bad file
                raise DataError(f"{path}: cannot read parquet: {exc}") from exc
        return _read_json(p)
    missing = unavailable(path)
    if missing:
        raise DataError(f"data file {path}: {missing}")
    return list(enumerate(_load_hf(path, from_disk=False, split=split), 1))


def _refuse_compressed(p: Path) -> None:
    """A gzip, zstd, bz2 or xz file would fail as "not UTF-8" JSON: say what it is."""
    with p.open("rb") as f:
        head = f.read(6)
    kinds = {b"\x1f\x8b": "gzip", b"\x28\xb5\x2f\xfd": "zstd", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz"}
    kind = next((name for magic, name in kinds.items() if head.startswith(magic)), None)
    if kind:
        raise DataError(f"{p}: a {kind}-compressed file: decompress it first (klear-lab reads .jsonl, .json and "
                        ".parquet files as they are)")


def hub_id_like(path: str) -> bool:
    """Whether ``path`` may be a hub dataset id (``org/name``, no suffix): a file source reads it from the hub
    when no such file or dataset directory is here."""
    return bool(_HUB_ID.match(path)) and not Path(path).suffix


def unavailable(path: str) -> str | None:
    """Why ``path`` cannot be read here (a missing file; a hub id while the hub is off), or None: it
    exists, or it is a hub id the hub may serve."""
    p = Path(path).expanduser()
    if p.exists():
        return None
    where = "no such file" if p.is_absolute() else f"no such file under the working directory {Path.cwd()}"
    if hub_id_like(path):
        off = hub_offline()
        if p.parent.is_dir() and off:  # `data/trian`: a local folder's typo, not a hub organisation's dataset
            return f"{where} (nor a dataset directory)"
        # online, a folder named like the hub organisation (`openai/` beside `openai/gsm8k`) leaves it a hub id
        return f"{where}, and as a hub id: {off} is set, no hub download" if off else None
    return where


def _read_json(p: Path) -> list[tuple[int, Any]]:
    raw = p.read_bytes()
    bom = len(codecs.BOM_UTF8) if raw.startswith(codecs.BOM_UTF8) else 0  # as Windows editors save UTF-8
    try:
        text = raw[bom:].decode("utf-8")
    except UnicodeDecodeError as exc:
        at = bom + exc.start
        line = raw.count(b"\n", 0, at) + 1
        raise DataError(f"{p}: row {line}: byte {raw[at]:#04x} at offset {at} is not UTF-8 (JSON "
                        "files are UTF-8: re-encode it, e.g. `iconv -f latin1 -t utf-8`)") from exc
    if p.suffix.lower() == ".json" and text.lstrip().startswith("["):
        try:
            return list(enumerate(json.loads(text, object_pairs_hook=_one_value_per_key), 1))
        except json.JSONDecodeError as exc:
            raise DataError(f"{p}: invalid JSON at line {exc.lineno}: {exc.msg}") from exc
        except _RepeatedKey as exc:
            raise DataError(f"{p}: a row gives {exc} twice: which value is meant?") from None
    try:
        return _json_lines(p, text)
    except DataError:
        if p.suffix.lower() == ".json" and isinstance(whole := _one_value(text), dict):
            return [(1, whole)]  # one object over many lines: a row, or one_object_error names the file's shape
        raise


def _one_value(text: str) -> Any:
    """The file's text as one JSON value, None where it is not one."""
    try:
        return json.loads(text, object_pairs_hook=_one_value_per_key)
    except (json.JSONDecodeError, _RepeatedKey):
        return None


def _json_lines(p: Path, text: str) -> list[tuple[int, Any]]:
    kind = p.suffix or "file without a suffix"
    hint = "" if p.suffix.lower() in (".jsonl", ".json") else \
        f"; a {kind} is read as JSON lines: give .jsonl, .json, .parquet or a saved dataset"
    rows = []
    # lines end at \n, \r\n or \r (which a JSON string cannot hold raw), not where str.splitlines also
    # splits: at U+2028, U+0085..., which JSON strings may hold raw
    for n, line in enumerate(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"), start=1):
        if line.strip():
            try:
                rows.append((n, json.loads(line, object_pairs_hook=_one_value_per_key)))
            except json.JSONDecodeError as exc:
                raise DataError(f"{p}: row {n}: invalid JSON ({exc.msg}){hint}") from exc
            except _RepeatedKey as exc:
                raise DataError(f"{p}: row {n}: {exc} is given twice: which value is meant?") from None
    return rows


class _RepeatedKey(ValueError):
    pass


def _one_value_per_key(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object that gives a key twice (json keeps the last value in silence) is refused, as YAML's is."""
    row = dict(pairs)
    if len(row) != len(pairs):
        keys = [k for k, _ in pairs]
        raise _RepeatedKey(repr(next(k for k in keys if keys.count(k) > 1)))
    return row


def _load_hf(path: str, *, from_disk: bool, split: str) -> list[Any]:
    import datasets

    try:
        ds = datasets.load_from_disk(path) if from_disk else datasets.load_dataset(path, split="train")
    except Exception as exc:  # noqa: BLE001 - any loader failure is a data problem
        shards = _data_files_in(Path(path)) if from_disk else []
        if shards:
            raise DataError(f"{path}: a folder of {'/'.join(shards)} files, not a datasets.save_to_disk directory: "
                            "give one file as the path (one source per file, or join the files into one)") from exc
        here = f" (nor is it a file or dataset directory under {Path(path).parent}/ here)" \
            if not from_disk and Path(path).expanduser().parent.is_dir() else ""  # a local folder's typo, likelier
        raise load_error(f"{path}: cannot load dataset{here}", exc, DataError) from exc
    return (_one_split(path, ds, split) if isinstance(ds, datasets.DatasetDict) else ds).to_list()


def _data_files_in(folder: Path) -> list[str]:
    """The data-file suffixes (``.jsonl``, ``.parquet``) of the files in ``folder``: a folder of shards."""
    try:
        return sorted({f.suffix.lower() for f in folder.iterdir() if f.suffix.lower() in (".jsonl", ".parquet")})
    except OSError:
        return []


_EVAL_SPLITS = ("test", "validation")


def _one_split(path: str, splits: Any, split: str) -> Any:
    """The split a saved ``DatasetDict`` serves: for training its ``train`` split, for held-out scoring its
    ``test`` (else ``validation``) split, else its only split."""
    wanted = ("train",) if split == "train" else _EVAL_SPLITS
    name = next((s for s in wanted if s in splits), None)
    if name is None and len(splits) == 1:
        name = next(iter(splits))
    if name is None:
        raise DataError(f"{path}: the dataset has splits {sorted(splits)} and none is "
                        f"{' or '.join(repr(s) for s in wanted)}: point the path at one split "
                        f"(path: {path.rstrip('/')}/{sorted(splits)[0]})")
    return splits[name]
