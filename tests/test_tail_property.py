"""Property: however a stream's lines and appends fall across chunks, a checkpoint's
fingerprints are the SHA-256 of the bytes written, and reads resumed from checkpoints
see exactly the lines one read of the whole file sees (up to a line that pauses reading).

The chunk and line caps are made small so that chunk boundaries, runaway lines and
resumes inside them happen in files of a few KiB; the fingerprinted lengths stay 1 KiB.
"""

from __future__ import annotations

import hashlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omg_ledger import tail

_PIECE = st.lists(st.sampled_from([b"a", b"b" * 30, b"c" * 700, b"\n", b"\r\n", b" ", b"\np"]), max_size=120)


def _expected_fingerprints(data: bytes, end: int) -> tuple[int, str, int, str]:
    n = min(1024, end)
    return n, hashlib.sha256(data[:n]).hexdigest(), n, hashlib.sha256(data[end - n:end]).hexdigest()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(appends=st.lists(_PIECE.map(b"".join), min_size=1, max_size=8),
       chunk=st.integers(1, 3000), cap=st.integers(1, 3000))
def test_resumed_reads_see_what_one_read_sees(tmp_path, monkeypatch, appends, chunk, cap):
    monkeypatch.setattr(tail, "READ_CHUNK", chunk)
    monkeypatch.setattr(tail, "MAX_LINE_BYTES", cap)
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"")

    def parse(seen):
        def parse_line(line, number, offset):
            if line.startswith(b"p"):  # a newer schema: reading stops before it, every time
                return tail.Paused(4, "newer")
            seen.append((number, offset, line))
            return line
        return parse_line

    checkpoint, seen, data = None, [], b""
    for piece in appends:
        data += piece
        with open(path, "ab") as f:
            f.write(piece)
        reader = tail.TailReader(str(path), checkpoint, parse(seen))
        list(reader)
        assert not reader.replace
        checkpoint = reader.checkpoint
        fingerprints = (checkpoint.head_len, checkpoint.head_sha256, checkpoint.tail_len, checkpoint.tail_sha256)
        assert fingerprints == _expected_fingerprints(data, checkpoint.end_offset)
    once: list = []
    whole = tail.TailReader(str(path), None, parse(once))
    list(whole)
    assert seen == once
    assert (whole.checkpoint.end_offset, whole.checkpoint.next_line) == (checkpoint.end_offset, checkpoint.next_line)
