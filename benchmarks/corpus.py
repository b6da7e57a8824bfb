"""Realistic oh-my-graph homes at scale, built from runs the real engine wrote.

The sources are the scale corpus (``corpus-scale/home.tar.gz``, 305 runs) and the
conformance corpus (``corpus/home``, 25 runs). A home of N runs is made of N copies of
those 330 runs, round-robin, each under a fresh run id:

* the run id is rewritten everywhere it appears in ``events.jsonl`` and the JSON files
  (``run_id`` fields, the paths in ``state.json`` that name the run directory) and in
  the directory name; ``goal.first_run_id`` follows its group: it names the copy of
  the first run made in the same batch;
* every ``ts`` in ``events.jsonl`` is shifted by one offset per copy (the same offset
  for the runs of one goal loop, so their order survives), spreading run starts over
  the 90 days before the home was built. The new run id is the shifted start time, as
  the engine names runs. Timestamps keep the engine's format (Go RFC 3339 with
  nanoseconds, trailing zeros trimmed: ``2026-11-29T18:15:18.132685405Z``);
* file and directory modes are kept; ``.out`` artifacts and ``resume.lock`` are copied
  byte for byte (no process holds any lock, so the abandoned runs stay ABANDONED).

Homes are cached per N under ``<work>/homes/n<N>/`` with a manifest; a home that a
benchmark modified (the incremental scenario appends legs) is restored from the
record written before the change, even after a crash.
"""

from __future__ import annotations

import calendar
import contextlib
import hashlib
import os
import random
import re
import shutil
import stat
import tarfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import orjson

GENERATOR_VERSION = 3
REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
SPREAD_NS = 90 * 86_400 * 10**9
NEWEST_GAP_NS = 3_600 * 10**9  # the newest copy starts at least an hour before the build
SNAPSHOT_NAMES = ("state.json", "assess.json", "rejected.json", "graph.json")

_RUN_ID = re.compile(rb"(\d{8}-\d{6})\.(\d{9})-(\d+)")
_TS = re.compile(rb'"ts":"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?Z"')


def corpus_dir() -> Path:
    return Path(os.environ.get("OMG_LEDGER_CORPUS", SHARED / "corpus"))


def scale_corpus_dir() -> Path:
    return Path(os.environ.get("OMG_LEDGER_CORPUS_SCALE", SHARED / "corpus-scale"))


# -- time formats -----------------------------------------------------------------------

_epoch_cache: dict[bytes, int] = {}
_second_cache: dict[int, str] = {}


def _epoch_seconds(text: bytes) -> int:
    value = _epoch_cache.get(text)
    if value is None:
        value = calendar.timegm(time.strptime(text.decode(), "%Y-%m-%dT%H:%M:%S"))
        _epoch_cache[text] = value
    return value


def _format_second(seconds: int) -> str:
    text = _second_cache.get(seconds)
    if text is None:
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        _second_cache[seconds] = text
    return text


def format_ts(ns: int) -> str:
    """Go's RFC3339Nano, as the engine writes ``ts``: trailing zeros of the fraction trimmed."""
    seconds, frac = divmod(ns, 10**9)
    fraction = f"{frac:09d}".rstrip("0")
    return _format_second(seconds) + (f".{fraction}" if fraction else "") + "Z"


def run_id_ns(run_id: str | bytes) -> int:
    raw = run_id.encode() if isinstance(run_id, str) else run_id
    match = _RUN_ID.fullmatch(raw)
    if match is None:
        raise ValueError(f"not an engine run id: {run_id!r}")
    seconds = calendar.timegm(time.strptime(match.group(1).decode(), "%Y%m%d-%H%M%S"))
    return seconds * 10**9 + int(match.group(2))


def make_run_id(ns: int, suffix: str) -> str:
    seconds, frac = divmod(ns, 10**9)
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime(seconds)) + f".{frac:09d}-{suffix}"


# -- sources --------------------------------------------------------------------------------


@dataclass
class Entry:
    rel: str  # path inside the run directory ("" for the directory itself)
    is_dir: bool
    mode: int
    data: bytes = b""


@dataclass
class SourceRun:
    run_id: str
    entries: list[Entry]
    first_run_id: str | None
    node_ids: list[str]
    json_names: list[str]
    events: int


@dataclass
class Sources:
    runs: list[SourceRun]
    plan_dirs: list[Path]
    fingerprint: str


def _unpack_scale(work: Path) -> Path | None:
    tarball = scale_corpus_dir() / "home.tar.gz"
    if not tarball.is_file():
        return None
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()[:16]
    target = work / "sources" / f"scale-{digest}"
    if (target / ".complete").exists():
        return target
    remove_tree(target)
    target.mkdir(parents=True)
    with tarfile.open(tarball) as archive:
        archive.extractall(target, filter="fully_trusted")  # modes and mtimes kept
    (target / ".complete").touch()
    return target


def _load_run(path: Path) -> SourceRun:
    entries = [Entry("", True, stat.S_IMODE(path.stat().st_mode))]
    for root, dirs, files in os.walk(path):
        dirs.sort()
        rel_root = os.path.relpath(root, path)
        for name in dirs:
            full = os.path.join(root, name)
            rel = name if rel_root == "." else os.path.join(rel_root, name)
            entries.append(Entry(rel, True, stat.S_IMODE(os.lstat(full).st_mode)))
        for name in sorted(files):
            full = os.path.join(root, name)
            rel = name if rel_root == "." else os.path.join(rel_root, name)
            info = os.lstat(full)
            if not stat.S_ISREG(info.st_mode):
                continue
            with open(full, "rb") as f:
                entries.append(Entry(rel, False, stat.S_IMODE(info.st_mode), f.read()))
    first_run_id = None
    node_ids: list[str] = []
    events = 0
    for entry in entries:
        if entry.rel == "state.json":
            with contextlib.suppress(ValueError):
                goal = orjson.loads(entry.data).get("goal") or {}
                first_run_id = goal.get("first_run_id") or None
        elif entry.rel == "events.jsonl":
            for line in entry.data.splitlines():
                if not line.strip():
                    continue
                events += 1
                with contextlib.suppress(ValueError):
                    node = orjson.loads(line).get("node_id")
                    if node and node not in node_ids:
                        node_ids.append(node)
    json_names = [e.rel for e in entries if e.rel in SNAPSHOT_NAMES]
    return SourceRun(path.name, entries, first_run_id, node_ids, json_names, events)


def load_sources(work: Path) -> Sources:
    homes: list[Path] = []
    scale = _unpack_scale(work)
    if scale is not None:
        homes.append(scale)
    if (corpus_dir() / "home" / "runs").is_dir():
        homes.append(corpus_dir() / "home")
    if not homes:
        raise SystemExit(f"no source runs: neither {scale_corpus_dir() / 'home.tar.gz'} nor "
                         f"{corpus_dir() / 'home'} exists (set OMG_LEDGER_CORPUS_SCALE / OMG_LEDGER_CORPUS)")
    runs: list[SourceRun] = []
    plans: list[Path] = []
    digest = hashlib.sha256(f"v{GENERATOR_VERSION}".encode())
    for home in homes:
        for entry in sorted(os.scandir(home / "runs"), key=lambda e: e.name):
            if entry.is_dir(follow_symlinks=False) and _RUN_ID.fullmatch(entry.name.encode()):
                run = _load_run(Path(entry.path))
                runs.append(run)
                digest.update(run.run_id.encode())
                for item in run.entries:
                    digest.update(item.rel.encode() + b"\0" + hashlib.sha256(item.data).digest())
        if (home / "plans").is_dir():
            plans.extend(sorted(p for p in (home / "plans").iterdir() if p.is_dir()))
    return Sources(runs, plans, digest.hexdigest()[:16])


# -- generation -------------------------------------------------------------------------------


@dataclass
class HomeInfo:
    path: Path
    runs: int
    events: int
    files: int
    bytes: int
    built_at: str
    build_seconds: float
    cached: bool
    json_names: dict[str, list[str]] = field(default_factory=dict)  # run id -> JSON files present
    node_ids: dict[str, list[str]] = field(default_factory=dict)  # run id -> node ids in its stream


def remove_tree(path: Path) -> None:
    """rm -rf that also copes with read-only directories (modes are kept from the corpus)."""

    def fix(func, target, _exc):
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(target), 0o700)
            os.chmod(target, 0o700)
        func(target)

    if path.exists():
        shutil.rmtree(path, onexc=fix) if _has_onexc() else shutil.rmtree(path, onerror=fix)


def _has_onexc() -> bool:
    import inspect

    return "onexc" in inspect.signature(shutil.rmtree).parameters


def _write_run(target: Path, run: SourceRun, id_map: dict[bytes, bytes], offset_ns: int) -> tuple[int, int]:
    def swap_id(match: re.Match) -> bytes:
        return id_map.get(match.group(0), match.group(0))

    def shift_ts(match: re.Match) -> bytes:
        fraction = (match.group(2) or b"").ljust(9, b"0")
        ns = _epoch_seconds(match.group(1)) * 10**9 + int(fraction) + offset_ns
        return b'"ts":"' + format_ts(ns).encode() + b'"'

    files = size = 0
    dirs: list[tuple[str, int]] = []
    for entry in run.entries:
        path = os.path.join(target, entry.rel) if entry.rel else str(target)
        if entry.is_dir:
            os.mkdir(path, 0o700)
            dirs.append((path, entry.mode))
            continue
        data = entry.data
        if entry.rel == "events.jsonl":
            data = _TS.sub(shift_ts, _RUN_ID.sub(swap_id, data))
        elif entry.rel.endswith(".json"):
            data = _RUN_ID.sub(swap_id, data)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        os.chmod(path, entry.mode)
        files += 1
        size += len(data)
    for path, mode in reversed(dirs):  # children first: a read-only parent is closed last
        os.chmod(path, mode)
    return files, size


def build_home(work: Path, n: int, *, regenerate: bool = False, now_ns: int | None = None) -> HomeInfo:
    """The home of ``n`` runs, from the cache when it is there and current."""
    sources = load_sources(work)
    home = work / "homes" / f"n{n}"
    manifest_path = home / "manifest.json"
    if not regenerate and manifest_path.is_file():
        manifest = orjson.loads(manifest_path.read_bytes())
        if manifest.get("fingerprint") == sources.fingerprint and manifest.get("runs") == n:
            restore_appended(home)
            return _info_from_manifest(home, manifest, cached=True)
    started = time.monotonic()
    remove_tree(home)
    staging = work / "homes" / f".n{n}.building"
    remove_tree(staging)
    (staging / "runs").mkdir(parents=True)
    (staging / "plans").mkdir()
    now_ns = time.time_ns() if now_ns is None else now_ns
    source_ids = {run.run_id for run in sources.runs}
    count = len(sources.runs)
    events = files = size = 0
    json_names: dict[str, list[str]] = {}
    node_ids: dict[str, list[str]] = {}
    used: set[str] = set()
    batches = (n + count - 1) // count
    for batch in range(batches):
        # One offset per goal group per batch: runs of one loop keep their spacing.
        offsets: dict[str, int] = {}
        id_map: dict[bytes, bytes] = {}
        for run in sources.runs:
            group = run.first_run_id if run.first_run_id in source_ids else run.run_id
            if group not in offsets:
                rng = random.Random(f"{batch}:{group}")
                start = now_ns - SPREAD_NS + int(rng.random() * (SPREAD_NS - NEWEST_GAP_NS))
                offsets[group] = start - run_id_ns(group)
            new_ns = run_id_ns(run.run_id) + offsets[group]
            suffix = run.run_id.rsplit("-", 1)[1]
            new_id = make_run_id(new_ns, suffix)
            while new_id in used:  # never in practice; a nanosecond later if it happens
                new_ns += 1
                new_id = make_run_id(new_ns, suffix)
            used.add(new_id)
            id_map[run.run_id.encode()] = new_id.encode()
        for index, run in enumerate(sources.runs):
            if batch * count + index >= n:
                break
            group = run.first_run_id if run.first_run_id in source_ids else run.run_id
            new_id = id_map[run.run_id.encode()].decode()
            made_files, made_bytes = _write_run(staging / "runs" / new_id, run, id_map, offsets[group])
            files += made_files
            size += made_bytes
            events += run.events
            json_names[new_id] = run.json_names
            node_ids[new_id] = run.node_ids
    for plan in sources.plan_dirs:
        shutil.copytree(plan, staging / "plans" / plan.name, symlinks=True)
    built_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now_ns // 10**9))
    manifest = {
        "generator": GENERATOR_VERSION, "fingerprint": sources.fingerprint, "runs": n, "events": events,
        "files": files, "bytes": size, "built_at": built_at, "build_seconds": round(time.monotonic() - started, 2),
        "json_names": json_names, "node_ids": node_ids,
    }
    (staging / "manifest.json").write_bytes(orjson.dumps(manifest))
    os.rename(staging, home)
    return _info_from_manifest(home, manifest, cached=False)


def _info_from_manifest(home: Path, manifest: dict, cached: bool) -> HomeInfo:
    return HomeInfo(home, manifest["runs"], manifest["events"], manifest["files"], manifest["bytes"],
                    manifest["built_at"], manifest["build_seconds"], cached, manifest["json_names"],
                    manifest["node_ids"])


def wait_until_settled(home: HomeInfo, seconds: float = 2.5) -> None:
    """The ledger does not trust a directory mtime younger than 2 s (racy-git rule), so a
    home touched a moment ago would be rescanned by the next sync. Wait that out."""
    newest = max(os.stat(home.path / "runs").st_mtime, os.stat(home.path / "manifest.json").st_mtime)
    delay = newest + seconds - time.time()
    if delay > 0:
        time.sleep(delay)


# -- incremental: one more leg appended to some runs ----------------------------------------

_DIRTY = "appended.json"


def pick_runs(home: HomeInfo, fraction: float = 0.01, seed: int = 8) -> list[str]:
    candidates = sorted(run for run, nodes in home.node_ids.items() if nodes)
    count = max(1, round(home.runs * fraction))
    return sorted(random.Random(seed).sample(candidates, min(count, len(candidates))))


def leg_lines(run_id: str, node_ids: list[str], start_ns: int, rng: random.Random) -> list[bytes]:
    """A resume leg as the engine writes it: run_started, node events, run_finished."""
    step = 40_000_000  # 40 ms between events
    lines = [{"schema": 3, "ts": format_ts(start_ns), "run_id": run_id, "event": "run_started"}]
    at = start_ns
    for node in node_ids[:3]:
        session = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        at += step
        lines.append({"schema": 3, "ts": format_ts(at), "run_id": run_id, "event": "node_started",
                      "node_id": node, "session_id": session})
        at += step
        lines.append({"schema": 3, "ts": format_ts(at), "run_id": run_id, "event": "node_passed",
                      "node_id": node, "verdict": "PASS", "cost_usd": round(rng.uniform(0.001, 0.09), 6),
                      "session_id": session, "provenance": "exit-only"})
    at += step
    lines.append({"schema": 3, "ts": format_ts(at), "run_id": run_id, "event": "run_finished",
                  "outcome": "passed"})
    return [orjson.dumps(line) + b"\n" for line in lines]


def append_legs(home: HomeInfo, run_ids: list[str], rng_seed: int = 0) -> int:
    """Append one leg to each run's events.jsonl; returns the number of lines appended.

    Before the first change the original size, mtime and mode of every touched stream
    are recorded, so :func:`restore_appended` can put the cached home back.
    """
    record_path = home.path / _DIRTY
    record = orjson.loads(record_path.read_bytes()) if record_path.exists() else {}
    paths = [home.path / "runs" / run / "events.jsonl" for run in run_ids]
    for path in paths:
        if str(path) not in record:
            info = os.stat(path)
            record[str(path)] = [info.st_size, info.st_atime_ns, info.st_mtime_ns, stat.S_IMODE(info.st_mode)]
    record_path.write_bytes(orjson.dumps(record))
    rng = random.Random(rng_seed)
    appended = 0
    now_ns = time.time_ns()
    for run_id, path in zip(run_ids, paths, strict=True):
        lines = leg_lines(run_id, home.node_ids[run_id], now_ns, rng)
        mode = stat.S_IMODE(os.stat(path).st_mode)
        if not mode & stat.S_IWUSR:
            os.chmod(path, mode | stat.S_IWUSR)
        with open(path, "ab") as f:
            f.write(b"".join(lines))
        if not mode & stat.S_IWUSR:
            os.chmod(path, mode)
        appended += len(lines)
    return appended


def restore_appended(home_path: Path) -> None:
    record_path = home_path / _DIRTY
    if not record_path.exists():
        return
    for path, (size, atime_ns, mtime_ns, mode) in orjson.loads(record_path.read_bytes()).items():
        with contextlib.suppress(FileNotFoundError):
            os.chmod(path, mode | stat.S_IWUSR)
            os.truncate(path, size)
            os.utime(path, ns=(atime_ns, mtime_ns))
            os.chmod(path, mode)
    record_path.unlink()
