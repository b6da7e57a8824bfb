"""The tail is not fooled by what log shippers get wrong (real corpus runs, real files).

Each case changes a real run's events.jsonl after a first sync the way a careless
tool or a hostile user would; the ledger after the next sync must equal a clean sync
of the final files (same events, same charges, same money), and nothing may be
counted twice.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from decimal import Decimal

import orjson
import pytest
from sqlalchemy import func, select

from omg_ledger import schema
from omg_ledger.db import open_ledger
from omg_ledger.sync import Home, sync
from omg_ledger.tail import MAX_LINE_BYTES, RUNAWAY_REASON

from .conftest import CORPUS
from .ledger_dump import diff, dump

RUN = "20261129-181518.678721711-1"  # s15-retry-failed: three legs, a paid retry
COMPARED = ("events", "legs", "nodes", "rounds", "charges", "findings", "goal_cycles")


def _charge(second: int, cost: float) -> bytes:
    return orjson.dumps({"schema": 3, "ts": f"2026-11-29T18:20:{second:02d}.000000000Z", "run_id": RUN,
                         "event": "node_passed", "node_id": "late", "verdict": "PASS",
                         "cost_usd": cost, "usage": {"input_tokens": 1, "output_tokens": 1}}) + b"\n"


def _truncate_and_regrow(path):
    data = path.read_bytes()
    lines = data.splitlines(keepends=True)
    keep, size = [], 0
    for line in lines:  # keep at least the fingerprinted head
        keep.append(line)
        size += len(line)
        if size > 1100:
            break
    with open(path, "r+b") as f:  # in place: same inode
        f.truncate(size)
        f.seek(size)
        while f.tell() <= len(data):
            f.write(_charge(f.tell() % 60, 2.4967))


def _rewrite_same_size_mtime_restored(path):
    info = os.stat(path)
    data = path.read_bytes()
    at = data.rindex(b'"cost_usd":0.')
    digits = at + len(b'"cost_usd":')
    changed = data[:digits] + b"9" + data[digits + 1:]  # 0.0xx -> 9.0xx, same length
    with open(path, "r+b") as f:
        f.write(changed)
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))


def _replace_by_rename(path):
    data = path.read_bytes()
    tmp = path.with_name("events.tmp")
    tmp.write_bytes(data + _charge(1, 0.5))
    os.replace(tmp, path)


def _append(path):
    with open(path, "ab") as f:
        f.write(_charge(2, 0.75))


def _shrink(path):
    data = path.read_bytes()
    lines = data.splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-2]))


CASES = {
    "truncate in place, regrow past the offset, head unchanged": _truncate_and_regrow,
    "same-size in-place rewrite, mtime restored": _rewrite_same_size_mtime_restored,
    "replaced by rename (new inode)": _replace_by_rename,
    "appended": _append,
    "shrunk": _shrink,
}


def _rows(engine, label: str) -> dict[str, list[tuple]]:
    data = dump(engine)
    return {name: data[name] for name in COMPARED} | {
        "runs": [tuple(kv for kv in row if kv[0] not in ("dir_path",)) for row in data["runs"]]}


@pytest.mark.parametrize("change", list(CASES), ids=list(CASES))
def test_the_tail_is_not_fooled(tmp_path, db_url, change):
    home = tmp_path / "home"
    (home / "runs" / RUN).mkdir(parents=True)
    stream = home / "runs" / RUN / "events.jsonl"
    shutil.copyfile(CORPUS / "home" / "runs" / RUN / "events.jsonl", stream)  # the stream alone: no snapshot
    engine = open_ledger(db_url)
    try:
        sync(engine, [Home.from_path(str(home), "h")])
        CASES[change](stream)
        sync(engine, [Home.from_path(str(home), "h")])
        incremental = _rows(engine, "h")
    finally:
        engine.dispose()
    clean = open_ledger(str(tmp_path / "clean.sqlite"))
    try:
        sync(clean, [Home.from_path(str(home), "h")])
        expected = _rows(clean, "h")
    finally:
        clean.dispose()
    assert incremental == expected, diff(expected, incremental)
    # The money is what the final file says, line by line.
    paid = sum(Decimal(str(orjson.loads(line)["cost_usd"])) for line in stream.read_bytes().splitlines()
               if b'"cost_usd"' in line)
    (run,) = incremental["runs"]
    assert dict(run)["cost_nano_usd"] == int(paid * 10**9)


def test_a_fifo_stream_is_never_opened(tmp_path):
    """Opening a FIFO would release a writer blocked in open() (which then dies of SIGPIPE)."""
    run_dir = tmp_path / "home" / "runs" / RUN
    run_dir.mkdir(parents=True)
    fifo = run_dir / "events.jsonl"
    os.mkfifo(fifo)
    writer = subprocess.Popen([sys.executable, "-c", f"open({str(fifo)!r}, 'w').write('x')"])
    try:
        engine = open_ledger(str(tmp_path / "ledger.sqlite"))
        report = sync(engine, [Home.from_path(str(tmp_path / "home"), "h")])
        engine.dispose()
        assert any("not a regular file" in p.reason and p.path == str(fifo) for p in report.problems)
        # Still blocked: our open releases it now, and what it writes arrives (had the sync
        # opened the FIFO, the writer would have died of SIGPIPE and we would read EOF).
        fd = os.open(fifo, os.O_RDONLY)
        try:
            assert os.read(fd, 1) == b"x"
        finally:
            os.close(fd)
        assert writer.wait() == 0
    finally:
        writer.kill()
        writer.wait()


def test_a_runaway_line_is_scanned_once(tmp_path):
    """A stream with no newline (a sparse file) is read once; later syncs read only
    what was appended, and the problem is recorded once, at the line's offset."""
    run_dir = tmp_path / "home" / "runs" / RUN
    run_dir.mkdir(parents=True)
    stream = run_dir / "events.jsonl"
    first = _charge(0, 0.25)
    size = 8 * MAX_LINE_BYTES
    with open(stream, "wb") as f:
        f.write(first)
        f.truncate(len(first) + size)  # a hole: zeros, no newline
    engine = open_ledger(str(tmp_path / "ledger.sqlite"))
    home = [Home.from_path(str(tmp_path / "home"), "h")]
    try:
        cold = sync(engine, home)
        assert cold.bytes_read == len(first) + size
        assert [(p.offset, p.reason) for p in cold.problems] == [(len(first), RUNAWAY_REASON)]
        assert sync(engine, home).bytes_read == 0  # unchanged: not even opened for reading
        with open(stream, "ab") as f:
            f.write(b"\0" * 10)
        assert sync(engine, home).bytes_read == 10  # only the appended bytes
        second = _charge(3, 0.5)
        with open(stream, "ab") as f:
            f.write(b"\n" + second)
        last = sync(engine, home)
        assert last.bytes_read == 1 + len(second)
        assert last.events_ingested == 1
        with engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(schema.events)).scalar() == 2
            assert conn.execute(select(schema.runs.c.cost_nano_usd)).scalar() == 750_000_000
            runaway = conn.execute(select(schema.problems.c.byte_offset).where(
                schema.problems.c.reason == RUNAWAY_REASON)).scalars().all()
        assert runaway == [len(first)]
    finally:
        engine.dispose()


def test_complete_lines_across_chunks_crlf_blanks_and_a_partial_tail(tmp_path):
    """Every complete line with its own offsets, whatever the chunk boundaries; the
    expectations are the byte positions of what the test wrote."""
    from omg_ledger.tail import READ_CHUNK, CompleteLines, TailReader

    body = b"x" * 1000
    lines = [b'{"a":1}', b"", b" \t\x0b\x0c", b'{"crlf":1}\r', b"y" * (MAX_LINE_BYTES + 1), b'{"after":1}']
    # Lines of 1,000 bytes until one straddles the first chunk's end.
    while sum(len(line) + 1 for line in lines) < READ_CHUNK + 5000:
        lines.insert(3, body)
    data = b"\n".join(lines) + b"\n" + b'{"partial":'
    path = tmp_path / "events.jsonl"
    path.write_bytes(data)
    expected, offset = [], 0
    for number, line in enumerate(lines, 1):
        end = offset + len(line) + 1
        shown = None if len(line) > MAX_LINE_BYTES else line.removesuffix(b"\r")
        expected.append((number, offset, end, shown))
        offset = end
    assert any(o < READ_CHUNK < e for _, o, e, _ in expected)  # one line spans the chunk boundary
    fd = os.open(path, os.O_RDONLY)
    try:
        assert list(CompleteLines(fd, 0, 1)) == expected
        # From a line's start in the middle, numbering goes on from there.
        middle = expected[3]
        assert list(CompleteLines(fd, middle[1], 4)) == expected[3:]
    finally:
        os.close(fd)
    # The tail hands on the non-blank lines and records the runaway one as a problem.
    reader = TailReader(str(path), None, lambda line, number, offset: (number, line))
    items = list(reader)
    assert items == [(n, line) for n, _, _, line in expected if line is not None and line.strip()]
    assert reader.problems == [(expected[-2][1], RUNAWAY_REASON)]
    assert reader.checkpoint.end_offset == len(data) - len(b'{"partial":')
    assert reader.checkpoint.next_line == len(lines) + 1


def _direct_fingerprints(data: bytes, end: int) -> tuple[int, str, int, str]:
    """The checkpoint's fingerprints computed by hand from the bytes the test wrote."""
    import hashlib

    head, tail = min(1024, end), min(1024, end)
    return (head, hashlib.sha256(data[:head]).hexdigest(), tail, hashlib.sha256(data[end - tail:end]).hexdigest())


def _fingerprints_of(checkpoint) -> tuple[int, str, int, str]:
    return checkpoint.head_len, checkpoint.head_sha256, checkpoint.tail_len, checkpoint.tail_sha256


@pytest.mark.parametrize("pieces", [
    [b"", b'{"a":1}\n'],  # a first line shorter than the head
    [b'{"a":1}\n{"b":', b'2}\n'],  # resumed inside the head, after a partial line
    [b'{"a":1}\n' * 300, b'{"b":2}\n' * 5],  # resumed past the head
    [b'{"a":"' + b"x" * (1 << 20) + b'"}\n', b'{"b":2}\n' * 2000],  # a chunk boundary inside a line
    [b'{"a":1}\n' + b"r" * ((1 << 20) + 10), b'r\n{"b":2}\n'],  # a runaway line resumed and ended
    [b'{"a":1}\n' + b"r" * ((1 << 20) + 10) + b"\n", b'{"b":2}\n' * 3],  # a runaway line just before
])
def test_a_checkpoint_fingerprints_the_bytes_it_read(tmp_path, pieces):
    """Head and tail fingerprints equal the SHA-256 of the file's first 1 KiB and of the
    1 KiB before the resume point, for fresh and resumed reads of any shape, and a
    resumed read goes on from where the first stopped."""
    from omg_ledger.tail import TailReader

    path = tmp_path / "events.jsonl"
    path.write_bytes(pieces[0])
    first = TailReader(str(path), None, lambda line, number, offset: line)
    list(first)
    assert _fingerprints_of(first.checkpoint) == _direct_fingerprints(pieces[0], first.checkpoint.end_offset)
    with open(path, "ab") as f:
        f.write(pieces[1])
    data = pieces[0] + pieces[1]
    second = TailReader(str(path), first.checkpoint, lambda line, number, offset: line)
    list(second)
    assert not second.replace and second.start == first.checkpoint.end_offset
    assert second.checkpoint.end_offset == data.rindex(b"\n") + 1
    assert _fingerprints_of(second.checkpoint) == _direct_fingerprints(data, second.checkpoint.end_offset)


def test_a_stream_rewritten_in_place_while_it_is_read_is_read_again_from_zero(tmp_path):
    """A file rewritten in place (same inode) after the first lines were read and before
    the rest: what was read mixes both versions, so the checkpoint must describe the bytes
    as read and the next read must start again from zero, not resume past the mix."""
    from omg_ledger.tail import READ_CHUNK, TailReader

    def lines(tag: bytes) -> bytes:  # two chunks' worth of 100-byte lines
        line = b'{"v":"' + tag * 91 + b'"}\n'
        return line * (2 * READ_CHUNK // len(line) + 1)

    old, new = lines(b"o"), lines(b"n") + b'{"v":"longer"}\n'  # a new size: not a same-size rewrite
    path = tmp_path / "events.jsonl"
    path.write_bytes(old)
    reader = TailReader(str(path), None, lambda line, number, offset: line)
    read = iter(reader)
    seen = [next(read)]
    with open(path, "r+b") as f:  # in place: the same inode
        f.write(new)
    seen.extend(read)
    assert seen[0] == old.split(b"\n")[0] and seen[-1] == new.split(b"\n")[-2]  # the read mixed both
    again = TailReader(str(path), reader.checkpoint, lambda line, number, offset: line)
    reread = list(again)
    assert again.replace and again.start == 0
    assert reread == new.split(b"\n")[:-1]


def test_a_stream_rewritten_while_a_runaway_line_is_scanned_is_read_again_from_zero(tmp_path):
    """Resumed inside a runaway line that does not end yet, the checkpoint keeps its resume
    point; the KiB before it is fingerprinted as verified when the file was opened, so a
    rewrite of that line (to a new size) during the scan is seen by the next read."""
    from omg_ledger.tail import TailReader

    def first_line(tag: bytes) -> bytes:  # the same head: its end is only in the tail
        return b'{"v":"' + b"x" * 1500 + tag * 493 + b'"}\n'

    runaway = b"r" * (MAX_LINE_BYTES + 10)
    path = tmp_path / "events.jsonl"
    path.write_bytes(first_line(b"o") + runaway)
    first = TailReader(str(path), None, lambda line, number, offset: line)
    assert list(first) == [first_line(b"o")[:-1]]
    assert first.checkpoint.end_offset == 2002 and first.checkpoint.scan_offset is not None
    with open(path, "ab") as f:
        f.write(b"r" * 100)  # the runaway line goes on
    second = TailReader(str(path), first.checkpoint, lambda line, number, offset: line)
    assert not second.replace and second.start == 2002
    with open(path, "r+b") as f:  # in place, to a new size, once the second read has begun
        f.write(first_line(b"n") + runaway + b"r" * 200)
    assert list(second) == []
    assert second.checkpoint.end_offset == 2002  # still inside the runaway line
    third = TailReader(str(path), second.checkpoint, lambda line, number, offset: line)
    assert third.replace and third.start == 0


def test_a_short_head_rewritten_while_a_runaway_line_is_resumed_is_read_again_from_zero(tmp_path):
    """Resumed inside a runaway line that begins within the first KiB, the head is
    fingerprinted from the bytes verified when the file was opened: a rewrite of the first
    line (to a new size) while the runaway line is scanned to its end is seen next time."""
    from omg_ledger.tail import TailReader

    runaway = b"r" * (MAX_LINE_BYTES + 10)
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"v":"old"}\n' + runaway)
    first = TailReader(str(path), None, lambda line, number, offset: line)
    assert list(first) == [b'{"v":"old"}']
    with open(path, "ab") as f:
        f.write(b'r\n{"b":2}\n')  # the runaway line ends, a line follows
    second = TailReader(str(path), first.checkpoint, lambda line, number, offset: line)
    assert not second.replace and second.start == 12
    with open(path, "r+b") as f:  # in place, to a new size, once the second read has begun
        f.write(b'{"v":"new"}\n' + runaway + b'r\n{"b":2}\n{"c":3}\n')
    assert list(second) == [b'{"b":2}', b'{"c":3}']
    third = TailReader(str(path), second.checkpoint, lambda line, number, offset: line)
    assert third.replace and third.start == 0


def test_a_crlf_line_of_exactly_the_cap_is_kept_wherever_the_chunks_end(tmp_path):
    """A line of MAX_LINE_BYTES bytes ended by CRLF is within the cap (the \\r is not the
    line's). A fresh read whose chunk ends between its \\r and \\n, and a read resumed after
    the line before it, must both keep it: what is stored cannot depend on where reads began."""
    from omg_ledger.tail import READ_CHUNK, TailReader

    first = b"a" * (READ_CHUNK - 2) + b"\n"  # ends at READ_CHUNK - 1: the next chunk ends after the \r
    exact = b"b" * MAX_LINE_BYTES
    path = tmp_path / "events.jsonl"
    path.write_bytes(first)
    resumed = TailReader(str(path), None, lambda line, number, offset: (number, len(line)))
    assert list(resumed) == [(1, READ_CHUNK - 2)]
    with open(path, "ab") as f:
        f.write(exact + b"\r\n" + b"c\n")
    assert len(first) + len(exact) + 1 == 2 * READ_CHUNK  # a fresh read's second chunk ends after the \r
    fresh = TailReader(str(path), None, lambda line, number, offset: (number, len(line)))
    after = TailReader(str(path), resumed.checkpoint, lambda line, number, offset: (number, len(line)))
    assert list(fresh) == [(1, READ_CHUNK - 2), (2, MAX_LINE_BYTES), (3, 1)] and fresh.problems == []
    assert list(after) == [(2, MAX_LINE_BYTES), (3, 1)] and after.problems == []
    assert fresh.checkpoint == after.checkpoint
