"""Property campaign: derived rows are a function of stored facts.

A ledger reached by any sequence of incremental syncs must equal, row for row in every
table that describes the files, a ledger made by one cold sync of the final homes; and
one run is billed once however it is reached.

A history is generated from a seed over copies of real engine runs: each run's final
stream and files are replayed as a sequence of states — stream prefixes cut at random
byte offsets (mid-line, mid-UTF-8 sequence, at line ends), grown by append, by atomic
rename or rewritten in place, now and then cut back; state.json / assess.json /
graph.json / rejected.json / resume.lock appearing, changing (an earlier-looking
version, a torn half-write), disappearing; .out files and failed/ replies appearing;
a run directory deleted and recreated; copies of runs in a second home, synced into
the same ledger; now and then (--damage) a stream changed as no engine writes it: its
first bytes zeroed (over one line or several), a byte-order mark put on it or taken off
again, a byte that is not UTF-8 put in one of its strings. After every step a real
`omg-ledger sync` process runs. At the end every file is put in its final state, synced
once more, and the ledger is compared with a cold sync of the final homes
(tests/ledger_dump.py), and `cost --json` with the spend summed by hand from the final files (a damaged run's spend aside: its lines lost,
its verdicts recovered from state.json, a first line that makes another run; the ledger's
own charges of its billed copy stand in, compared with the cold sync's with the rest).
Each run's identity is checked against its stream's head and first stored line, and no
state of the history may have made a rule fail (a problem naming a bug of omg-ledger,
resolved since or open: a sync no longer stops on one, so nothing else shows it).

With the operator steps (on in script mode, --no-operator for none): a home renamed, or
reached through a symlink and later by its own path again; a run directory moved to the
other home; a run copied into the other home and its billed copy then removed (the
other copy must be billed, the total unchanged); `omg-ledger rebuild` between syncs; a
sync killed with SIGKILL at a random moment (its workers must end by themselves);
--workers 0, 2 and the default alternating. Runs moved or removed for good are history
no cold sync has: each must be gone and one the history moved, and the rest is compared.
`runs --json` statuses are checked against the engine's `runs list`.

Where the corpus has the engine's own `runs list`, each final run's state.json cost is
checked against it too. Which of two equal copies is billed is "the first seen"
(README), so it is left out of the comparison and checked as the rule itself (and so
is a diverged_copy finding between two copies holding as many events: _findings_as_compared).

Run as a script (seeds are recorded in its output; the same seed is the same history):

    PYTHONPATH=$PWD python -m tests.sync_campaign --seeds 0-9 --every-step
    PYTHONPATH=$PWD python -m tests.sync_campaign --source scale --runs 40 --seeds 0-2
    PYTHONPATH=$PWD python -m tests.sync_campaign --pg --runs 12 --seeds 0-1
    PYTHONPATH=$PWD python -m tests.sync_campaign --source scale --runs 130 --seeds 0 --pool

tests/test_sync_campaign.py runs one seed at a small size (SQLite and PostgreSQL).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("OMG_LEDGER_CORPUS", REPO.parent / "shared" / "corpus")).parent
CORPUS_HOME = SHARED / "corpus" / "home"
SCALE_TARBALL = SHARED / "corpus-scale" / "home.tar.gz"
CONTRACT_FILES = ("state.json", "assess.json", "graph.json", "rejected.json", "resume.lock")

# Tables compared whole. problems is compared as its open rows only (a problem an
# earlier state had and the final files no longer have is kept resolved: history).
# ingest_state is a rescan cache (ledger_dump's cache hints), left out by dump().
COMPARED_EXCEPT = {"problems"}
DERIVED_TABLES = ("legs", "nodes", "rounds", "charges", "findings", "goal_cycles", "derive_states")


@dataclass
class Slot:
    """One run directory in one home: its final bytes and the state it is in now."""

    home: str  # 'a' or 'b'
    run_id: str
    final: dict[str, bytes]  # relative path -> bytes (events.jsonl included)
    final_dirs: list[str]  # relative directories, empty ones included
    cut: int = 0  # bytes of the final stream written so far
    has_stream: bool = False
    files: dict[str, bytes] = field(default_factory=dict)  # what is there now, other than the stream
    dirs: set[str] = field(default_factory=set)
    present: bool = False  # the directory exists
    departed: bool = False  # removed for good (the other home holds the run): never touched again

    @property
    def stream(self) -> bytes:
        return self.final.get("events.jsonl", b"")


def read_run(run_dir: Path) -> tuple[dict[str, bytes], list[str]]:
    files, dirs = {}, []
    for root, dirnames, filenames in os.walk(run_dir):
        rel_root = Path(root).relative_to(run_dir)
        for d in dirnames:
            dirs.append(str(rel_root / d))
        for f in filenames:
            files[str(rel_root / f)] = (Path(root) / f).read_bytes()
    return files, sorted(dirs)


def _variant(name: str, data: bytes, rng: random.Random) -> bytes:
    """An earlier-looking version of a contract file: still the right shape where it can be."""
    if rng.random() < 0.25 and len(data) > 2:
        return data[: rng.randrange(1, len(data))]  # torn: a half-written file
    if name == "resume.lock":
        return b"oh-my-graph-lock 1\n" + str(rng.randrange(2, 99999)).encode() + b"\n"
    try:
        doc = json.loads(data)
    except ValueError:
        return data[: len(data) // 2]
    if not isinstance(doc, dict):
        return data[: len(data) // 2]
    if name == "state.json" and isinstance(doc.get("nodes"), dict) and doc["nodes"]:
        nodes = dict(doc["nodes"])
        victim = rng.choice(sorted(nodes))
        if rng.random() < 0.5 or not isinstance(nodes[victim], dict):
            del nodes[victim]
        else:
            nodes[victim] = {**nodes[victim], "cost_usd": round(rng.random() / 10, 4)}
        doc["nodes"] = nodes
    elif name == "assess.json" and "assess_cost_usd" in doc:
        doc["assess_cost_usd"] = round(rng.random() / 10, 4)
    else:
        key = rng.choice(sorted(doc)) if doc else None
        if key is not None:
            del doc[key]
    return json.dumps(doc, indent=2).encode()


def _same_size_change(data: bytes, rng: random.Random) -> bytes:
    """One digit changed (or, with no digit, one letter): a file rewritten in place at the
    same size, as `cp -p` of another version over it leaves it."""
    digits = [i for i, b in enumerate(data) if 0x30 <= b <= 0x39] or [
        i for i, b in enumerate(data) if 0x61 <= b <= 0x7A]
    if not digits:
        return data
    at = rng.choice(digits)
    pool = b"0123456789" if data[at] <= 0x39 else b"abcdefghijklmnopqrstuvwxyz"
    new = rng.choice([c for c in pool if c != data[at]])
    return data[:at] + bytes([new]) + data[at + 1:]


BOM = b"\xef\xbb\xbf"
DAMAGE_KINDS = ("bytes of the stream zeroed", "mark prepended", "mark removed", "put in a string")
# tail.HEAD_BYTES: a stream grown in place is taken to hold what was read when its first
# KiB and the KiB before the last offset read are unchanged (the engine only appends); a
# change in place elsewhere is written as an editor saves, a new file.
HEAD_FINGERPRINT = 1024


def _string_bytes(stream: bytes) -> list[int]:
    """Offsets of the ASCII bytes inside JSON strings (keys and values, escapes aside) of
    the stream's lines, as a scan of each line from its start finds them."""
    out, inside, escaped = [], False, False
    for i, b in enumerate(stream):
        if b == 0x0A:
            inside = escaped = False
        elif inside:
            if escaped:
                escaped = False
            elif b == 0x5C:
                escaped = True
            elif b == 0x22:
                inside = False
            elif 0x20 <= b < 0x7F:
                out.append(i)
        elif b == 0x22:
            inside = True
    return out


def _cut_points(stream: bytes, rng: random.Random, count: int) -> list[int]:
    """Increasing byte offsets into the stream, ending at its length: line ends, mid-line,
    and inside a multi-byte UTF-8 sequence where the stream has one."""
    if not stream:
        return []
    line_ends = [i + 1 for i, b in enumerate(stream) if b == 0x0A]
    mid_utf8 = [i for i, b in enumerate(stream) if 0x80 <= b < 0xC0]  # continuation bytes
    points = set()
    for _ in range(count):
        roll = rng.random()
        if roll < 0.35 and line_ends:
            points.add(rng.choice(line_ends))
        elif roll < 0.5 and mid_utf8:
            points.add(rng.choice(mid_utf8))
        else:
            points.add(rng.randrange(1, len(stream) + 1))
    points.discard(len(stream))
    return sorted(points) + [len(stream)]


class Campaign:
    def __init__(self, seed: int, runs: list[Path], work: Path, db: str, *, steps: int, second_home: float,
                 workers: str | None = None, every_step: bool = False, hostile: bool = True,
                 burst: bool = False, operator: bool = False, kills: bool = True, damage: float = 0.3) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        # Damaged heads and bytes that are not UTF-8 draw from their own generator too: a
        # seed's history is otherwise the one it was before they were added.
        self.damage = damage  # the chance, each step, that one stream is damaged
        self.harm = random.Random(f"damage-{seed}")
        self.damaged: set[str] = set()  # run ids any copy of which was damaged at some step
        # What an operator's machine does between syncs (operator=True) draws from its own
        # generator: the files' history of a seed is the same with it or without it.
        self.operator = operator
        self.kills = kills  # False: the kill steps are drawn (the same history) but not done (no timing)
        self.ops = random.Random(f"operator-{seed}")
        self.access: dict[str, Path] = {}  # label -> the path syncs name it by (a symlink), when not its own
        self.departed_ever: set[tuple[str, str]] = set()  # (home label, run id) moved or removed at some step
        self.renames = 0
        self.work = work
        self.db = db
        self.steps = steps
        self.workers = workers
        self.every_step = every_step
        self.hostile = hostile  # also rewrite files in place with their mtime restored
        self.burst = burst  # the first step touches every run: that many new runs at once (a pool)
        self.homes = {"a": work / "home-a", "b": work / "home-b"}
        for home in self.homes.values():
            (home / "runs").mkdir(parents=True)
        self.slots: list[Slot] = []
        for run_dir in runs:
            files, dirs = read_run(run_dir)
            self.slots.append(Slot("a", run_dir.name, files, dirs))
            if self.rng.random() < second_home:
                copy = dict(files)
                if self.rng.random() < 0.5 and "events.jsonl" in copy:
                    # The backup holds a prefix of the stream (whole lines) and no snapshot.
                    lines = copy["events.jsonl"].splitlines(keepends=True)
                    copy["events.jsonl"] = b"".join(lines[: max(1, len(lines) // 2)])
                    copy.pop("state.json", None)
                    copy.pop("assess.json", None)
                self.slots.append(Slot("b", run_dir.name, copy, dirs))
        self.plans: dict[int, list[int]] = {}
        for index, slot in enumerate(self.slots):
            self.plans[index] = _cut_points(slot.stream, self.rng, self.rng.randrange(1, 6))
        self.syncs = 0
        self.failures: list[str] = []
        self.checks: list[str] = []  # what the operator steps checked along the way, one line each

    # -- the files -------------------------------------------------------------------

    def _dir(self, slot: Slot) -> Path:
        return self.homes[slot.home] / "runs" / slot.run_id

    def _ensure_dir(self, slot: Slot) -> Path:
        d = self._dir(slot)
        if not slot.present:
            d.mkdir(parents=True)
            slot.present = True
            for rel in sorted(slot.dirs):
                (d / rel).mkdir(parents=True, exist_ok=True)
            if slot.has_stream:
                (d / "events.jsonl").write_bytes(slot.stream[: slot.cut])
            for rel, data in slot.files.items():
                (d / rel).parent.mkdir(parents=True, exist_ok=True)
                (d / rel).write_bytes(data)
        return d

    def _write_stream(self, slot: Slot, cut: int, how: str) -> None:
        d = self._ensure_dir(slot)
        path = d / "events.jsonl"
        data = slot.stream[:cut]
        if how == "append" and slot.has_stream and cut >= slot.cut:
            with open(path, "ab") as f:
                f.write(slot.stream[slot.cut: cut])
        elif how == "rename":
            tmp = d / ".events.jsonl.tmp"
            tmp.write_bytes(data)
            os.replace(tmp, path)
        else:  # in place: same inode, truncated and rewritten
            with open(path, "r+b" if path.exists() else "wb") as f:
                f.truncate(0)
                f.write(data)
        slot.cut = cut
        slot.has_stream = True

    def _write_file(self, slot: Slot, rel: str, data: bytes | None, how: str) -> None:
        d = self._ensure_dir(slot)
        path = d / rel
        if data is None:
            path.unlink(missing_ok=True)
            slot.files.pop(rel, None)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        if how == "rename":
            tmp = path.with_name("." + path.name + ".tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)
        else:
            with open(path, "r+b" if path.exists() else "wb") as f:
                f.truncate(0)
                f.write(data)
        slot.files[rel] = data

    def _age_directories(self) -> None:
        """Time passes (as between cron syncs): a directory changed in the last seconds gets
        an mtime a few seconds back, so the next sync trusts it (discover.trusted_mtime)
        and a file rewritten in place later leaves it as it is."""
        now = time.time_ns()
        for home in self.homes.values():
            for root, dirnames, _files in os.walk(home):
                for d in [root, *(os.path.join(root, n) for n in dirnames)]:
                    info = os.stat(d)
                    if now - info.st_mtime_ns < 5 * 10**9:
                        os.utime(d, ns=(info.st_atime_ns, now - 5 * 10**9))

    def _delete_dir(self, slot: Slot) -> None:
        if slot.present:
            shutil.rmtree(self._dir(slot))
            slot.present = False

    # -- one step --------------------------------------------------------------------

    def _touch_slot(self, index: int) -> str:
        """One change to one run directory, chosen among those that apply to it now."""
        slot = self.slots[index]
        rng = self.rng
        plan = self.plans[index]
        name = f"{slot.home}/{slot.run_id}"
        if not slot.present and (slot.has_stream or slot.files):
            self._ensure_dir(slot)
            return f"{name}: directory recreated"
        extras = [rel for rel in slot.final if rel != "events.jsonl" and Path(rel).name not in CONTRACT_FILES]
        contract = [rel for rel in slot.final if Path(rel).name in CONTRACT_FILES]
        choices = {"delete": 0.03 if slot.present else 0,
                   "grow": 0.45 if plan else 0,
                   "cut back": 0.03 if slot.cut > 0 else 0,
                   "extra": 0.12 if extras else 0,
                   "contract": 0.32 if contract else 0,
                   "same size": 0.05 if self.hostile and any(r in slot.files for r in contract) else 0,
                   "dirs": 0.02 if slot.final_dirs else 0}
        if not any(choices.values()):
            return f"{name}: nothing left to change"
        op = rng.choices(list(choices), list(choices.values()))[0]
        if op == "delete":
            self._delete_dir(slot)
            return f"{name}: directory deleted"
        if op == "grow":
            cut = plan.pop(0)
            how = rng.choices(["append", "rename", "inplace"], [0.8, 0.12, 0.08])[0]
            self._write_stream(slot, cut, how)
            return f"{name}: stream {how} to {cut}/{len(slot.stream)}"
        if op == "cut back":
            cut = rng.randrange(0, slot.cut)
            self._write_stream(slot, cut, rng.choice(["rename", "inplace"]))
            self.plans[index] = sorted({p for p in plan if p > cut} | {len(slot.stream)})
            return f"{name}: stream cut back to {cut}"
        if op == "extra":
            rel = rng.choice(extras)
            if rel in slot.files and rng.random() < 0.3:
                self._write_file(slot, rel, None, "")
                return f"{name}: {rel} removed"
            slot.dirs.update(d for d in slot.final_dirs if rel.startswith(d + "/"))
            self._write_file(slot, rel, slot.final[rel], "rename")
            return f"{name}: {rel} written"
        if op == "same size":
            rel = rng.choice([r for r in contract if r in slot.files])
            changed = _same_size_change(slot.files[rel], rng)
            path = self._dir(slot) / rel
            info = os.stat(path)
            with open(path, "r+b") as f:
                f.write(changed)
            os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
            slot.files[rel] = changed
            return f"{name}: {rel} rewritten in place, same size, mtime restored"
        if op == "contract":
            rel = rng.choice(contract)
            how = rng.choice(["rename", "inplace"])
            kind = rng.choices(["final", "variant", "remove"], [0.5, 0.35, 0.15])[0]
            data = (slot.final[rel] if kind == "final" else
                    _variant(rel, slot.final[rel], rng) if kind == "variant" else None)
            self._write_file(slot, rel, data, how)
            return f"{name}: {rel} {kind} ({how})"
        d = self._ensure_dir(slot)
        for rel in slot.final_dirs:
            slot.dirs.add(rel)
            (d / rel).mkdir(parents=True, exist_ok=True)
        return f"{name}: directories made"

    def _damage_stream(self) -> str:
        """One stream changed as no engine writes it: its first K bytes zeroed (a crash left
        a backup's first sectors unwritten; K may span several lines), a UTF-8 byte-order
        mark prepended (an editor's save) or removed again, or a byte that is not UTF-8 put
        inside a string of one line (written or still to come). Copies of a run in both
        homes are chosen more often: a damaged copy beside an intact one is the shape."""
        rng = self.harm
        live = [i for i, slot in enumerate(self.slots) if not slot.departed and slot.stream]
        if not live:
            return "no stream to damage"
        homes_of: dict[str, int] = {}
        for i in live:
            homes_of[self.slots[i].run_id] = homes_of.get(self.slots[i].run_id, 0) + 1
        copied = [i for i in live if homes_of[self.slots[i].run_id] > 1]
        marked = [i for i in live if self.slots[i].stream.startswith(BOM)]
        op = None
        if marked and rng.random() < 0.3:  # the editor's mark taken out again, about as often as put in
            index, op = rng.choice(marked), "repair"
        else:
            index = rng.choice(copied if copied and rng.random() < 0.6 else live)
        slot = self.slots[index]
        name = f"{slot.home}/{slot.run_id}"
        written = slot.present and slot.has_stream and slot.cut > 0
        choices = {"zero": 0.3 if written else 0,
                   "bom": 0.2 if written and not slot.stream.startswith(BOM) else 0,
                   "repair": 0.2 if slot.stream.startswith(BOM) else 0,
                   "byte": 0.3 if _string_bytes(slot.stream) else 0}
        if not any(choices.values()):
            return f"{name}: no damage applies"
        if op is None:
            op = rng.choices(list(choices), list(choices.values()))[0]
        self.damaged.add(slot.run_id)
        stream = slot.stream
        if op == "zero":
            ends = [i + 1 for i, b in enumerate(stream[: slot.cut]) if b == 0x0A]
            roll = rng.random()
            if roll < 0.3 and ends:
                k = rng.choice(ends[:4])  # whole lines, their newline too: one line of NULs and the next
            elif roll < 0.6 and ends:
                k = rng.choice(ends[:4]) - 1  # a line's bytes, not its newline: the next line is intact
            else:
                k = rng.randrange(1, min(slot.cut, 1500) + 1)
            k = max(1, min(k, slot.cut))
            self._rewrite_stream(slot, b"\0" * k + stream[k:], changed_to=k)
            return f"{name}: first {k} bytes of the stream zeroed"
        if op == "bom":
            self._rewrite_stream(slot, BOM + stream, shift=len(BOM))
            return f"{name}: byte-order mark prepended"
        if op == "repair":
            self._rewrite_stream(slot, stream[len(BOM):], shift=-len(BOM))
            return f"{name}: byte-order mark removed"
        at = rng.choice(_string_bytes(stream))
        bad = rng.choice([b"\xff", b"\xfe", b"\x80", b"\xc3", b"\xed", b"\xe2\x82"])
        self._rewrite_stream(slot, stream[:at] + bad + stream[at + 1:], shift=len(bad) - 1, changed_to=at + 1,
                             after=at)
        line = stream[:at].count(b"\n") + 1
        return f"{name}: {bad!r} put in a string of stream line {line} ({'written' if at < slot.cut else 'to come'})"

    def _rewrite_stream(self, slot: Slot, stream: bytes, shift: int = 0, changed_to: int | None = None,
                        after: int = 0) -> None:
        """``stream`` is the slot's final stream now; the part written is rewritten to match:
        in place where only the fingerprinted head changed at the same size (a crash's
        zeros), else as an editor saves (a new file renamed over it). ``shift``: bytes
        added (taken, if negative) at ``after``: the offsets past it move so much."""
        slot.final["events.jsonl"] = stream
        index = self.slots.index(slot)
        self.plans[index] = sorted(q for q in {p + shift if p > after else p for p in self.plans[index]} if q > 0)
        if slot.cut > after:
            slot.cut = max(0, slot.cut + shift)
        if not (slot.present and slot.has_stream):
            return
        if changed_to is not None and changed_to > slot.cut:
            return  # the change is in what is still to come
        path = self._dir(slot) / "events.jsonl"
        if shift == 0 and changed_to is not None and changed_to <= HEAD_FINGERPRINT:
            info = os.stat(path)
            with open(path, "r+b") as f:
                f.write(stream[:changed_to])
            if self.hostile and self.harm.random() < 0.5:  # (its ctime still says it was written)
                os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
        else:
            tmp = path.with_name(".events.jsonl.edit")
            tmp.write_bytes(stream[: slot.cut])
            os.replace(tmp, path)

    def _finish(self) -> None:
        """Every slot to its final bytes (files written in place or renamed at random)."""
        for slot in self.slots:
            if slot.departed:
                continue
            d = self._ensure_dir(slot)
            if "events.jsonl" in slot.final and (not slot.has_stream or slot.cut != len(slot.stream)):
                self._write_stream(slot, len(slot.stream), "append" if slot.has_stream else "rename")
            for rel in slot.final_dirs:
                (d / rel).mkdir(parents=True, exist_ok=True)
                slot.dirs.add(rel)
            for rel, data in slot.final.items():
                if rel != "events.jsonl" and slot.files.get(rel) != data:
                    self._write_file(slot, rel, data, self.rng.choice(["rename", "inplace"]))
            for rel in list(slot.files):
                if rel not in slot.final:
                    self._write_file(slot, rel, None, "")

    # -- syncs -----------------------------------------------------------------------

    def _sync_args(self, db: str, homes: list[str], workers: str | None, through_links: bool) -> list[str]:
        args = [sys.executable, "-m", "omg_ledger.cli", "sync", "--db", db]
        for label in homes:
            path = self.access.get(label, self.homes[label]) if through_links else self.homes[label]
            args += ["--home", f"{label}={path}"]
        if workers is not None:
            args += ["--workers", workers]
        return args

    def sync(self, db: str, homes: list[str], workers: str | None = None,
             through_links: bool = False) -> subprocess.CompletedProcess:
        args = self._sync_args(db, homes, workers, through_links)
        done = subprocess.run(args, capture_output=True, text=True, env=cli_env(self.work))
        self.syncs += 1
        if done.returncode != 0 or "Traceback" in done.stderr:
            self.failures.append(f"sync {homes} exit {done.returncode}: {done.stderr.strip()[-2000:]}")
        return done

    def run(self) -> list[str]:
        """The history, then the final state; returns what was done, one line a step."""
        done = []
        for step in range(self.steps):
            indices = [i for i, slot in enumerate(self.slots) if not slot.departed]
            touched = (indices if self.burst and step == 0 else
                       self.rng.sample(indices, k=min(len(indices), self.rng.randrange(1, 12))))
            for index in touched:
                done.append(f"step {step}: {self._touch_slot(index)}")
            if self.harm.random() < self.damage:
                done.append(f"step {step}: {self._damage_stream()}")
            if self.operator:
                done += [f"step {step}: {what}" for what in self._operator_changes(step)]
            if self.rng.random() < 0.7:
                self._age_directories()
            homes = self.rng.choice([["a"], ["a", "b"], ["b", "a"], ["b"]])
            workers = self._workers()
            if self.operator and self.ops.random() < 0.12:
                done.append(f"step {step}: sync {homes} killed: {self.killed_sync(homes, workers)}")
            done.append(f"step {step}: sync {homes}" + (f" --workers {workers}" if workers else "")
                        + "".join(f" ({label} through {self.access[label].name})" for label in homes
                                  if label in self.access))
            self.sync(self.db, homes, workers, through_links=True)
            if self.operator and self.ops.random() < 0.12:
                done.append(f"step {step}: rebuild")
                self.rebuild()
            if self.every_step and len(homes) == 2:
                cold = str(self.work / f"cold-step-{step}.sqlite")
                self.sync(cold, ["a", "b"], self.workers, through_links=True)
                for difference in present_run_differences(self.db, cold, self.damaged):
                    self.failures.append(f"step {step}: {difference}")
                os.unlink(cold)
        self._finish()
        done.append("final: every file in its final state; sync ['a', 'b']")
        self.sync(self.db, self.rng.choice([["a", "b"], ["b", "a"]]), self.workers)
        return done

    # -- what an operator's machine does ------------------------------------------------

    def _workers(self) -> str | None:
        """The pool and one process, alternating at random (operator), else as given."""
        if not self.operator:
            return self.workers
        return self.ops.choice([self.workers, "0", "2"])

    def _operator_changes(self, step: int) -> list[str]:
        """A home renamed or reached through a symlink, a run directory moved to the other
        home, a run's billed copy removed while the other home holds the same bytes."""
        rng, done = self.ops, []
        if rng.random() < 0.08:
            label = rng.choice(["a", "b"])
            self.renames += 1
            new = self.work / f"home-{label}-renamed-{self.renames}"
            os.rename(self.homes[label], new)
            self.homes[label] = new
            self.access.pop(label, None)  # a symlink to the old path leads nowhere now
            done.append(f"home {label} renamed to {new.name}")
        if rng.random() < 0.1:
            label = rng.choice(["a", "b"])
            if label in self.access and rng.random() < 0.5:
                done.append(f"home {label} named by its own path again, not {self.access.pop(label).name}")
            else:
                link = self.work / f"link-{label}-{step}"
                link.symlink_to(self.homes[label])
                self.access[label] = link
                done.append(f"home {label} reached through the symlink {link.name}")
        if rng.random() < 0.08:
            done.append(self._move_run())
        if rng.random() < 0.06:
            done.append(self._remove_billed_copy(step))
        return done

    def _alone(self) -> list[int]:
        """Slots on disk whose run the other home has no slot for."""
        held = {(slot.home, slot.run_id) for slot in self.slots if not slot.departed}
        return [i for i, slot in enumerate(self.slots)
                if slot.present and not slot.departed and ({"a": "b", "b": "a"}[slot.home], slot.run_id) not in held]

    def _move_run(self) -> str:
        candidates = self._alone()
        if not candidates:
            return "no run to move"
        slot = self.slots[self.ops.choice(candidates)]
        other = {"a": "b", "b": "a"}[slot.home]
        os.rename(self._dir(slot), self.homes[other] / "runs" / slot.run_id)
        self.departed_ever.add((slot.home, slot.run_id))
        moved_from, slot.home = slot.home, other
        return f"{moved_from}/{slot.run_id}: run directory moved to home {other}"

    def _remove_billed_copy(self, step: int) -> str:
        """The same bytes copied into the other home, both synced; then the billed copy's
        directory removed for good and both synced again: the other copy is billed (the
        one on disk, README) and the total is what it was."""
        candidates = self._alone()
        if not candidates:
            return "no run to copy"
        index = self.ops.choice(candidates)
        slot = self.slots[index]
        other = {"a": "b", "b": "a"}[slot.home]
        shutil.copytree(self._dir(slot), self.homes[other] / "runs" / slot.run_id, symlinks=True)
        twin = Slot(other, slot.run_id, dict(slot.final), list(slot.final_dirs), cut=slot.cut,
                    has_stream=slot.has_stream, files=dict(slot.files), dirs=set(slot.dirs), present=True)
        self.slots.append(twin)
        self.plans[len(self.slots) - 1] = list(self.plans[index])
        order = self.ops.choice([["a", "b"], ["b", "a"]])
        self.sync(self.db, order, self._workers(), through_links=True)
        before = cost_total(self.db, self.work)
        billed = self.billed_homes(slot.run_id)
        if len(billed) != 1:
            self.failures.append(f"step {step}: {slot.run_id} copied into both homes: billed in {billed}")
            return f"{slot.run_id}: copied, billed in {billed}"
        (label,) = billed
        removed, kept = (slot, twin) if label == slot.home else (twin, slot)
        shutil.rmtree(self._dir(removed))
        removed.present, removed.departed = False, True
        self.departed_ever.add((removed.home, removed.run_id))
        self.sync(self.db, self.ops.choice([["a", "b"], ["b", "a"]]), self._workers(), through_links=True)
        after, billed_now = cost_total(self.db, self.work), self.billed_homes(slot.run_id)
        if billed_now != [kept.home] or after != before:
            self.failures.append(f"step {step}: {slot.run_id}'s billed copy in {label} removed, the same bytes in "
                                 f"{kept.home}: billed now in {billed_now}, total {before} -> {after} nano-USD")
        self.checks.append(f"{slot.run_id}: billed copy {label} removed; billed {billed_now}, total {before} -> {after}")
        return f"{slot.run_id}: copied into {other}, synced, the billed copy ({label}) removed"

    def billed_homes(self, run_id: str) -> list[str]:
        from tests.ledger_dump import dump

        return sorted(dict(row)["home_id"] for row in dump(self.db)["runs"]
                      if dict(row)["run_id"] == run_id and dict(row)["billed"])

    def rebuild(self) -> None:
        done = subprocess.run([sys.executable, "-m", "omg_ledger.cli", "rebuild", "--db", self.db],
                              capture_output=True, text=True, env=cli_env(self.work))
        if done.returncode != 0 or "Traceback" in done.stderr:
            self.failures.append(f"rebuild exit {done.returncode}: {done.stderr.strip()[-2000:]}")

    def killed_sync(self, homes: list[str], workers: str | None) -> str:
        """A sync killed with SIGKILL at a random moment (the OOM killer, a reboot): the
        next one carries on. Its pool's workers, if any, must end by themselves."""
        delay = self.ops.uniform(0.05, 0.9)
        if not self.kills:
            return "(not done: kills off)"
        args = self._sync_args(self.db, homes, workers, through_links=True)
        process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   env=cli_env(self.work), start_new_session=True)
        time.sleep(delay)
        if process.poll() is not None:
            return f"it had ended (exit {process.returncode})"
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        deadline = time.monotonic() + 15
        while (left := session_pids(process.pid)) and time.monotonic() < deadline:
            time.sleep(0.1)
        if left:
            self.failures.append(f"a killed sync's processes {left} still run 15 s after it (workers {workers})")
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        return "SIGKILL"


def session_pids(session: int) -> list[int]:
    """The processes still running in the session a killed sync led (its workers)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session and fields[0] != "Z":
            out.append(int(entry))
    return out


def cli_env(work: Path) -> dict[str, str]:
    """The CLI's environment: this checkout, and no user's home, config or ledger."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMG_", "XDG_"))}
    env["HOME"] = str(work / "user-home")
    env["XDG_DATA_HOME"] = str(work / "user-home" / "data")
    env["XDG_CONFIG_HOME"] = str(work / "user-home" / "config")
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def compared(target: str, departed: set[tuple[str, str]] = frozenset(),
             damaged: set[str] = frozenset()) -> dict[str, list[tuple]]:
    """A ledger's dump as compared; ``departed``: (home label, run id) of runs whose
    directories were moved or removed for good, left out (history no cold sync can know:
    departed_problems() checks them); ``damaged``: run ids with a damaged stream
    (_findings_as_compared)."""
    from tests.ledger_dump import dump

    data = dump(target)
    if departed:
        data = {name: [row for row in rows if _run_key(name, row) not in departed] for name, rows in data.items()}
    out = {name: rows for name, rows in data.items() if name not in COMPARED_EXCEPT}
    # Which of two equal copies is billed is "the first seen" (README): history, not the
    # files. billing_problems() checks the rule itself.
    out["runs"] = sorted((tuple(kv for kv in row if kv[0] != "billed") for row in data["runs"]), key=repr)
    out["problems (open)"] = sorted((r for r in data["problems"] if dict(r)["resolved_at"] is None), key=repr)
    out["findings"], out["findings (either copy)"] = _findings_as_compared(data["findings"], departed, damaged)
    return out


DIVERGED = re.compile(r"^this copy \(home (?P<mine>.+?)\) and the billed copy \(home (?P<billed>.+?)\) "
                      r"(?P<rest>.*); the billed copy holds (?P<billed_events>\d+) events, this one (?P<events>\d+)$")


def _findings_as_compared(rows: list[tuple], departed: set[tuple[str, str]] = frozenset(),
                          damaged: set[str] = frozenset()) -> tuple[list, list]:
    """(findings compared as they are, diverged_copy findings between two copies of equal
    event counts). Of two diverged copies holding as many events, the billed one is the
    first seen (history, as runs.billed) and the finding is on the other: those are
    compared without which copy holds it. Where a copy's head is damaged, two such copies
    hold different parts of the stream (the damaged one its later lines): whether one
    differs from the other then depends on which is billed, and the finding is left out
    as runs.billed is (which of them the rule should bill is an open question). A finding
    against a billed copy the history moved or removed is history too (no cold sync has
    that copy): left out."""
    kept, either = [], []
    for row in rows:
        d = dict(row)
        match = DIVERGED.match(d["detail"] or "") if d["kind"] == "diverged_copy" else None
        if match is None:
            kept.append(row)
        elif (match["billed"], d["run_pk"][1]) in departed:
            continue
        elif match["events"] == match["billed_events"]:
            if d["run_pk"][1] in damaged:
                continue
            # (The line is the unbilled copy's: with a damaged head, its lines are numbered
            # otherwise than the other copy's.)
            either.append((("run_id", d["run_pk"][1]), ("copies", tuple(sorted((match["mine"], match["billed"])))),
                           ("rest", re.sub(r"stream line \d+", "stream line N", match["rest"])),
                           ("events", match["events"])))
        else:
            kept.append(row)
    return sorted(kept, key=repr), sorted(either, key=repr)


def _run_key(table: str, row: tuple) -> tuple | None:
    if table == "alembic_version":
        return None
    d = dict(row)
    if table == "runs":
        return (d["home_id"], d["run_id"])
    return d.get("run_pk")


def departed_problems(target: str, cold: str, departed_ever: set[tuple[str, str]]) -> tuple[set, list[str]]:
    """The runs of the history's ledger no cold sync of the final homes has: each must be
    gone and one the history moved or removed. Returns them, and what is wrong."""
    from tests.ledger_dump import dump

    cold_keys = {(dict(r)["home_id"], dict(r)["run_id"]) for r in dump(cold)["runs"]}
    extra, problems = set(), []
    for row in dump(target)["runs"]:
        run = dict(row)
        key = (run["home_id"], run["run_id"])
        if key in cold_keys:
            continue
        extra.add(key)
        if not run["gone"] or key not in departed_ever:
            problems.append(f"run {key} is in the ledger (gone: {run['gone']}) and no cold sync of the final "
                            f"homes has it, but the history {'moved it' if key in departed_ever else 'never moved it'}")
    return extra, problems


def present_run_differences(incremental: str, cold: str, damaged: set[str] = frozenset()) -> list[str]:
    """Per run still on disk: its rows in the history's ledger and in a cold sync of the
    files as they are now (billed aside, see compared())."""
    from tests.ledger_dump import dump, runs_of

    def rows(target):
        out = {}
        by_run = runs_of(dump(target))
        gone = {key for key, tables in by_run.items() if dict(tables["runs"][0])["gone"]}
        for key, tables in by_run.items():
            if key in gone:
                continue
            (run,) = tables["runs"]
            tables["runs"] = [tuple(kv for kv in run if kv[0] != "billed")]
            kept, either = _findings_as_compared(tables.pop("findings", []), gone, damaged)
            if kept:
                tables["findings"] = kept
            if either:  # (under the run id: on either copy)
                out.setdefault(("either copy", key[1]), {}).setdefault("findings", []).extend(either)
            out[key] = tables
        return out

    mine, theirs = rows(incremental), rows(cold)
    out = []
    for key in sorted(set(mine) | set(theirs)):
        if mine.get(key) != theirs.get(key):
            a, b = mine.get(key, {}), theirs.get(key, {})
            tables = sorted(t for t in set(a) | set(b) if a.get(t) != b.get(t))
            detail = "; ".join(f"{t}: -{[dict(r) for r in b.get(t, []) if r not in a.get(t, [])][:2]} "
                               f"+{[dict(r) for r in a.get(t, []) if r not in b.get(t, [])][:2]}" for t in tables)
            out.append(f"run {key} differs from a cold sync of the same files: {detail}")
    return out


def rule_failures(target: str) -> list[str]:
    """Every problem, resolved ones too, that says a rule failed on a run or a runner
    stream: a bug of omg-ledger, whatever the files. Such a run is a problem now, not a
    stopped sync, so only its problem row tells (one resolved since was at some state)."""
    from omg_ledger.derive import RULE_FAILED, STREAM_RULE_FAILED
    from tests.ledger_dump import dump

    return [f"{row['path']}: {row['reason']}" for row in map(dict, dump(target)["problems"])
            if row["reason"].startswith((RULE_FAILED, STREAM_RULE_FAILED))]


def billing_problems(target: str) -> list[str]:
    """One billed copy per run identity, and it holds most of the stream (then: the latest
    last line).
    A stream-less identity ('<id>:no-stream': no line of its stream, or its head damaged)
    is a copy of its run id's one streamed run, billed only where it holds most of that
    run's stream; beside two streamed runs of its id it is never billed; with none, one
    of its copies is."""
    from tests.ledger_dump import dump

    by_run_id: dict[str, dict[str, list[dict]]] = {}
    for row in dump(target)["runs"]:
        run = dict(row)
        identity = run["stream_identity"] or f"(none) {run['home_id']}/{run['run_id']}:"
        by_run_id.setdefault(identity.rsplit(":", 1)[0], {}).setdefault(identity, []).append(run)
    problems = []
    for run_id, identities in sorted(by_run_id.items()):
        stream_less = identities.pop(f"{run_id}:no-stream", [])
        groups = sorted(identities.items())
        if len(groups) == 1:
            groups = [(groups[0][0], groups[0][1] + stream_less)]
        elif not groups and stream_less:
            groups = [(f"{run_id}:no-stream", stream_less)]
        elif [m for m in stream_less if m["billed"]]:
            problems.append(f"{run_id}:no-stream: a stream-less copy billed beside {len(groups)} runs of its id: "
                            f"{[(m['home_id'], m['gone']) for m in stream_less if m['billed']]}")
        for identity, members in groups:
            billed = [m for m in members if m["billed"]]
            best = max(_reach(m) for m in members)
            if len(billed) != 1 or _reach(billed[0]) != best:
                problems.append(f"{identity}: billed copies {[(m['home_id'], m['event_count'], m['gone']) for m in billed]}"
                                f" of {[(m['home_id'], m['event_count'], m['gone']) for m in members]}")
    return problems


def _reach(run: dict) -> tuple:
    """What decides first which copy is billed: most lines, then the latest last line."""
    last = run["last_event_at_us"]
    return run["event_count"], -1 if last is None else last


def identity_problems(target: str) -> list[str]:
    """Each run's identity against its stream: a stream beginning with a byte-order mark
    or a NUL (no event line can) is '<run id>:no-stream', and so is every run whose first
    stored line is not at byte 0 or holds U+FFFD (a byte that is not UTF-8); one whose
    first stored line is there, intact, is its run id with that line's hash."""
    import hashlib

    from tests.ledger_dump import dump

    data = dump(target)
    first: dict[tuple, tuple[int, int, str]] = {}
    for row in data["events"]:
        event = dict(row)
        key = event["run_pk"]
        if key not in first or event["line_no"] < first[key][0]:
            first[key] = (event["line_no"], event["byte_offset"], event["raw"])
    problems = []
    for row in data["runs"]:
        run = dict(row)
        key = (run["home_id"], run["run_id"])
        if run["gone"] or run["stream_identity"] is None:
            continue
        stream = Path(run["dir_path"]) / "events.jsonl"
        head = stream.read_bytes()[:3] if stream.is_file() else b""
        stored = first.get(key)
        if head.startswith((BOM, b"\0")) or stored is None or stored[1] > 0 or "\ufffd" in stored[2]:
            expected = f"{run['run_id']}:no-stream"
        else:
            expected = f"{run['run_id']}:{hashlib.sha256(stored[2].encode('utf-8')).hexdigest()[:32]}"
        if run["stream_identity"] != expected:
            problems.append(f"{key}: identity {run['stream_identity']}, its stream's head {head!r} and first "
                            f"stored line {stored[:2] if stored else None} make it {expected}")
    return problems


def listing_problems(target: str, work: Path) -> list[str]:
    """`runs --json` (no --since) lists each billed copy once and nothing else: a run with
    a damaged copy, or two runs of one id, as many times as it is billed."""
    from tests.ledger_dump import dump

    done = subprocess.run([sys.executable, "-m", "omg_ledger.cli", "runs", "--db", target, "--json"],
                          capture_output=True, text=True, env=cli_env(work), check=True)
    listed = sorted((run["home"], run["run_id"]) for run in json.loads(done.stdout))
    billed = sorted((dict(r)["home_id"], dict(r)["run_id"]) for r in dump(target)["runs"] if dict(r)["billed"])
    if listed == billed:
        return []
    return [f"runs --json lists {sorted(set(listed) - set(billed))[:5]} not billed and leaves out "
            f"{sorted(set(billed) - set(listed))[:5]} billed ({len(listed)} rows, {len(billed)} billed)"]


TRUTH_ROW = re.compile(r"^(\d{8}-\d{6}\.\d{9}-\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)$")
TRUTH = (SHARED / "corpus" / "truth" / "runs-list.txt", SHARED / "corpus-scale" / "truth-runs-list.txt")


def _engine_truth(group: int) -> dict[str, str]:
    """Run id -> one column (a TRUTH_ROW group) of the engine's own `runs list`."""
    truth = {}
    for path in TRUTH:
        for line in path.read_text().splitlines():
            match = TRUTH_ROW.match(line)
            if match:
                truth[match.group(1)] = match.group(group)
    return truth


def engine_readback_problems(target: str, label: str = "a", damaged: set[str] = frozenset()) -> list[str]:
    """Each run of home ``label`` (the final bytes of real runs) against the engine's own
    `runs list`: its state.json cost (printed to 4 places; a sum ending in 5 at the fifth
    may print either neighbour, corpus-scale/README.md) and unknown where it says so.
    ``damaged``: run ids whose streams the history damaged (the engine never read those)."""
    from tests.ledger_dump import dump

    truth = _engine_truth(4)
    problems, checked = [], 0
    for row in dump(target)["runs"]:
        run = dict(row)
        printed = truth.get(run["run_id"])
        if run["home_id"] != label or printed in (None, "-") or run["gone"] or run["run_id"] in damaged:
            continue
        checked += 1
        if printed == "unknown":
            ok = bool(run["snapshot_cost_unknown"])
        else:
            # A refused plan leaves no state.json: the engine prints its planning cost,
            # from run_finished (corpus-scale/README.md), which is the run's one charge.
            nanos = run["snapshot_cost_nano_usd"] if run["has_state"] else run["cost_nano_usd"]
            ok = nanos is not None and abs(Decimal(nanos).scaleb(-9) - Decimal(printed)) <= Decimal("0.00005")
        if not ok:
            problems.append(f"{run['run_id']}: engine's runs list says {printed}, the ledger's state.json cost is "
                            f"{run['snapshot_cost_nano_usd']} nano-USD (unknown: {run['snapshot_cost_unknown']})")
    return problems if checked else ["no run of the engine's runs list was found to check"]


def engine_status_problems(target: str, work: Path, damaged: set[str] = frozenset()) -> list[str]:
    """`runs --json` (no --since) against the engine's own `runs list` status, for every
    run it lists that the engine listed: each run's billed copy holds its final bytes (a
    backup's prefix copy never holds most of the stream), and no process holds a lock."""
    truth = _engine_truth(6)
    done = subprocess.run([sys.executable, "-m", "omg_ledger.cli", "runs", "--db", target, "--json"],
                          capture_output=True, text=True, env=cli_env(work), check=True)
    problems, checked = [], 0
    for run in json.loads(done.stdout):
        if run["run_id"] in truth and run["run_id"] not in damaged:
            checked += 1
            if run["status"] != truth[run["run_id"]]:
                problems.append(f"{run['home']}/{run['run_id']}: runs --json says {run['status']}, the engine "
                                f"{truth[run['run_id']]}")
    return problems if checked else ["no run of the engine's runs list was listed"]


def known_spend_by_hand(homes: list[Path], leave_out: set[str] = frozenset()) -> int:
    """Every run's known spend from its fullest copy's files: each accounting line's
    cost_usd (unless cost_unknown) plus assess.json's assess_cost_usd, in nano-USD.
    ``leave_out``: run ids not summed (damaged streams: lines lost, a verdict recovered
    from state.json, a first line that makes a second run)."""
    best: dict[str, tuple[int, int]] = {}  # run id -> (lines, nanos) of its fullest copy
    for home in homes:
        for run_dir in sorted((home / "runs").iterdir()):
            if run_dir.name in leave_out:
                continue
            total, lines = Decimal(0), 0
            stream = run_dir / "events.jsonl"
            if stream.exists():
                for line in stream.read_bytes().split(b"\n")[:-1]:  # complete lines only
                    lines += 1
                    event = json.loads(line)
                    if "cost_usd" in event and not event.get("cost_unknown"):
                        total += Decimal(str(event["cost_usd"]))
            assess = run_dir / "assess.json"
            if assess.exists():
                doc = json.loads(assess.read_bytes())
                if isinstance(doc.get("assess_cost_usd"), int | float) and not doc.get("assess_cost_unknown"):
                    total += Decimal(str(doc["assess_cost_usd"]))
            nanos = int(total * 10**9)
            if run_dir.name not in best or lines > best[run_dir.name][0]:
                best[run_dir.name] = (lines, nanos)
    return sum(nanos for _lines, nanos in best.values())


def cost_total(db: str, work: Path) -> int:
    done = subprocess.run([sys.executable, "-m", "omg_ledger.cli", "cost", "--db", db, "--json"],
                          capture_output=True, text=True, env=cli_env(work), check=True)
    return json.loads(done.stdout)["total"]["cost_nano_usd"]


def billed_charges(db: str, run_ids: set[str]) -> int:
    """The known spend of the billed copies of ``run_ids``, from the ledger's charges."""
    from tests.ledger_dump import dump

    data = dump(db)
    billed = {(dict(r)["home_id"], dict(r)["run_id"]) for r in data["runs"]
              if dict(r)["billed"] and dict(r)["run_id"] in run_ids}
    return sum(dict(c)["cost_nano_usd"] or 0 for c in data["charges"] if dict(c)["run_pk"] in billed)


def check(campaign: Campaign, cold_db: str) -> list[str]:
    """Differences between the history's ledger and a cold sync of the final homes."""
    from tests.ledger_dump import diff

    problems = list(campaign.failures)
    campaign.sync(cold_db, ["a", "b"], campaign.workers)
    problems += campaign.failures[len(problems):]
    departed, wrong = departed_problems(campaign.db, cold_db, campaign.departed_ever)
    problems += wrong
    incremental, cold = compared(campaign.db, departed, campaign.damaged), compared(cold_db, damaged=campaign.damaged)
    if incremental != cold:
        problems.append("incremental != cold:\n" + diff(cold, incremental))
    for name, db in (("incremental", campaign.db), ("cold", cold_db)):
        problems += [f"{name} rule failure: {p}" for p in rule_failures(db)]
        problems += [f"{name} billing: {p}" for p in billing_problems(db)]
        problems += [f"{name} identity: {p}" for p in identity_problems(db)]
        problems += [f"{name} listing: {p}" for p in listing_problems(db, campaign.work)]
    damaged = campaign.damaged
    problems += [f"engine read-back: {p}" for p in engine_readback_problems(campaign.db, damaged=damaged)]
    if campaign.operator:
        problems += [f"engine status: {p}" for p in engine_status_problems(campaign.db, campaign.work, damaged)]
    # Damaged runs' spend is the ledger's own (compared with a cold sync's above).
    by_hand = known_spend_by_hand(list(campaign.homes.values()), damaged)
    for name, db in (("incremental", campaign.db), ("cold", cold_db)):
        total = cost_total(db, campaign.work) - billed_charges(db, damaged)
        if total != by_hand:
            problems.append(f"cost --json of the {name} ledger{' (damaged runs aside)' if damaged else ''}: "
                            f"{total} nano-USD, by hand {by_hand}")
    return problems


# -- sources ---------------------------------------------------------------------------


def corpus_runs(source: str, scratch: Path) -> list[Path]:
    if source == "corpus":
        return sorted((CORPUS_HOME / "runs").iterdir())
    target = scratch / "scale-home"
    if not target.exists():
        with tarfile.open(SCALE_TARBALL) as archive:
            archive.extractall(target, filter="data")
    return sorted((target / "runs").iterdir())


def run_one(seed: int, runs: list[Path], work: Path, db_kind: str, steps: int, pg=None,
            workers: str | None = None, every_step: bool = False,
            hostile: bool = True, operator: bool = True, damage: float = 0.3) -> tuple[list[str], list[str]]:
    """One seeded history; (what it did, the differences found)."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    if db_kind == "sqlite":
        db, cold = str(work / "history.sqlite"), str(work / "cold.sqlite")
    else:
        db = pg.create_database(f"campaign_{seed}_history")
        cold = pg.create_database(f"campaign_{seed}_cold")
    campaign = Campaign(seed, runs, work, db, steps=steps, second_home=0.3, workers=workers,
                        every_step=every_step, hostile=hostile, operator=operator, damage=damage)
    steps_done = campaign.run()
    return steps_done, check(campaign, cold)


def pool_against_one_process(seed: int, runs: list[Path], work: Path, steps: int, damage: float = 0.3) -> list[str]:
    """The same seeded history twice, its first step making every run new at once (a
    pool of workers for 100 or more): synced by the pool, and with --workers 0. Each
    must equal its own cold sync, and the two histories' ledgers each other."""
    from tests.ledger_dump import diff

    if work.exists():
        shutil.rmtree(work)
    problems, ledgers = [], {}
    for workers in (None, "0"):
        where = work / f"workers-{workers or 'pool'}"
        where.mkdir(parents=True)
        history = Campaign(seed, runs, where, str(where / "history.sqlite"), steps=steps, second_home=0.1,
                           workers=workers, burst=True, damage=damage)
        history.run()
        problems += [f"workers {workers or 'pool'}: {p}" for p in check(history, str(where / "cold.sqlite"))]
        # Two histories' files are at other paths with other inodes and times: their
        # derived rows, events and directory facts are compared.
        data = compared(history.db, damaged=history.damaged)
        data["runs"] = [tuple(kv for kv in row if kv[0] != "dir_path") for row in data["runs"]]
        ledgers[workers] = {t: data[t] for t in (*DERIVED_TABLES, "events", "run_files", "runs")}
    if ledgers[None] != ledgers["0"]:
        problems.append("pool history != --workers 0 history:\n" + diff(ledgers["0"], ledgers[None]))
    return problems


def _seeds(text: str) -> list[int]:
    if "-" in text:
        low, high = text.split("-")
        return list(range(int(low), int(high) + 1))
    return [int(s) for s in text.split(",")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0-4")
    parser.add_argument("--source", choices=["corpus", "scale"], default="corpus")
    parser.add_argument("--runs", type=int, default=0, help="sample this many runs (0: all)")
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--pg", action="store_true", help="PostgreSQL (a private server, tests/pgserver.py)")
    parser.add_argument("--workers", default=None)
    parser.add_argument("--work", default=os.environ.get("CAMPAIGN_WORK", "/tmp/sync-campaign"))
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--pool", action="store_true",
                        help="the same history synced by the worker pool and by --workers 0 (give --runs 100+)")
    parser.add_argument("--no-hostile", action="store_true",
                        help="never rewrite a file in place with its mtime restored")
    parser.add_argument("--no-operator", action="store_true",
                        help="no operator steps (home renames and symlinks, runs moved between homes, a billed "
                             "copy removed, rebuild, SIGKILLed syncs, --workers alternating)")
    parser.add_argument("--damage", type=float, default=0.3,
                        help="the chance, each step, that one stream's head is zeroed, a byte-order mark is "
                             "prepended or removed, or a byte that is not UTF-8 is put in a string (0: never)")
    parser.add_argument("--every-step", action="store_true",
                        help="also compare each run on disk with a cold sync after every two-home step")
    options = parser.parse_args()
    scratch = Path(options.work)
    scratch.mkdir(parents=True, exist_ok=True)
    all_runs = corpus_runs(options.source, scratch)
    server = None
    if options.pg:
        from tests.pgserver import PostgresServer, find_pg_bindir

        server = PostgresServer(find_pg_bindir()).start()
    failed = 0
    for seed in _seeds(options.seeds):
        rng = random.Random(f"sample-{seed}")
        runs = sorted(rng.sample(all_runs, options.runs)) if options.runs else all_runs
        if options.pool:
            problems = pool_against_one_process(seed, runs, scratch / f"pool-seed-{seed}", options.steps,
                                                options.damage)
            print(f"seed {seed}: {len(runs)} runs, pool and --workers 0: {'ok' if not problems else 'DIVERGED'}")
            for p in problems:
                print("  " + p.replace("\n", "\n  ")[:5000])
            failed += bool(problems)
            continue
        steps, problems = run_one(seed, runs, scratch / f"seed-{seed}", "pg" if options.pg else "sqlite",
                                  options.steps, server, options.workers, options.every_step,
                                  not options.no_hostile, not options.no_operator, options.damage)
        status = "ok" if not problems else "DIVERGED"
        damage = {kind: sum(kind in s for s in steps) for kind in DAMAGE_KINDS}
        print(f"seed {seed}: {len(runs)} runs, {options.steps} steps: {status} (damage: "
              f"{', '.join(f'{n} {kind}' for kind, n in damage.items() if n) or 'none'})", flush=True)
        if problems:
            failed += 1
            for p in problems:
                print("  " + p.replace("\n", "\n  "))
            if options.verbose:
                print("\n".join("    " + s for s in steps))
    if server is not None:
        server.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
