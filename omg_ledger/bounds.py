"""Bounds on what one input may put into the ledger, so no input can stop it.

Pure functions, no I/O. Two kinds:

* Text that goes into an indexed column. PostgreSQL refuses a btree entry over 2704
  bytes ("index row size ... exceeds btree maximum"), which would fail every sync. Ids
  are refused at validation (MAX_ID_CHARS, in feed.py and snapshot.py); a problem's
  path and reason are our own text about bad input, so they are shortened instead,
  keeping a hash of the whole so that distinct texts stay distinct rows.
* Money and tokens summed per run. One charge is capped (feed.MAX_COST_USD, $100k =
  1e14 nano-dollars); a run's known total is capped at MAX_RUN_NANOS ($1e9 = 1e18
  nano-dollars), under the 2**63 - 1 a 64-bit column holds. A charge that would take
  its run past the bound is not counted as money: it stays an invocation whose cost is
  unknown, and the run gets a problem at that charge. Reports sum exactly without
  64-bit overflow however many runs there are (reports/cost.py splits each value).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

MAX_ID_CHARS = 512  # 4 bytes a character at most: 2 KB, inside a btree entry
MAX_REASON_BYTES = 600
MAX_PATH_BYTES = 1200
_HASH_CHARS = 12

NANOS_PER_USD = 1_000_000_000
MAX_RUN_NANOS = 10**18  # $1,000,000,000 of known spend in one run
MAX_RUN_TOKENS = 10**18  # per token field, in one run
RUN_BOUND_TEXT = "$1,000,000,000"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_CHARS]


def _cut(data: bytes, limit: int) -> str:
    """The first ``limit`` bytes of UTF-8 ``data``, never splitting a character."""
    return data[:limit].decode("utf-8", "ignore")


def bounded_reason(reason: str) -> str:
    """A problem reason short enough to index: the head, then a hash of the whole."""
    data = reason.encode("utf-8", "surrogatepass")
    if len(data) <= MAX_REASON_BYTES:
        return reason
    return f"{_cut(data, MAX_REASON_BYTES)}… [{len(data)} bytes, sha256 {_digest(reason)}]"


def bounded_path(path: str) -> str:
    """A path short enough to index: a hash of the whole, then the tail (the run
    directory and the file name are at the end)."""
    data = path.encode("utf-8", "surrogatepass")
    if len(data) <= MAX_PATH_BYTES:
        return path
    tail = data[-MAX_PATH_BYTES:].decode("utf-8", "ignore")
    return f"[sha256 {_digest(path)}]…{tail}"


def shown(value: object, limit: int = 80) -> str:
    """``repr(value)`` for a problem reason, shortened: the value is bad input of any size."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def too_long_id(name: str, value: object) -> str | None:
    """The reason an id is refused, or None when it is a string of sane length."""
    if isinstance(value, str) and len(value) > MAX_ID_CHARS:
        return f"'{name}' is {len(value)} characters long (max {MAX_ID_CHARS}): not an id"
    return None


class RunTally:
    """A run's running totals, charge by charge, in ledger order.

    ``admit`` says whether a charge still fits under the per-run bound. Once one does
    not, counting stops: that charge and every later one are beyond the bound, so what
    is counted is a prefix of the run as the stream wrote it, never a selection.
    """

    def __init__(self) -> None:
        self.money = 0
        self.tokens = [0, 0, 0, 0]
        self.exhausted = False

    def admit(self, cost: int | None, tokens: Sequence[int] = (0, 0, 0, 0)) -> bool:
        """``tokens``: the four token fields (feed.TOKEN_FIELDS), in their order."""
        if self.exhausted:
            return False
        money = self.money + (cost or 0)
        # The four token fields spelled out: this runs once per charge, and a loop over
        # them costs more than the rest of the charge's bookkeeping.
        have = self.tokens
        counts = [have[0] + tokens[0], have[1] + tokens[1], have[2] + tokens[2], have[3] + tokens[3]]
        if money > MAX_RUN_NANOS or counts[0] > MAX_RUN_TOKENS or counts[1] > MAX_RUN_TOKENS \
                or counts[2] > MAX_RUN_TOKENS or counts[3] > MAX_RUN_TOKENS:
            self.exhausted = True
            return False
        self.money, self.tokens = money, counts
        return True


def beyond_run_bound(charges: Sequence[tuple[int | None, Sequence[int]]]) -> int | None:
    """Index of the first of a run's (cost, tokens) charges that is beyond the per-run
    bound (it and every later one are), or None when all of them fit."""
    tally = RunTally()
    for index, (cost, tokens) in enumerate(charges):
        if not tally.admit(cost, tokens):
            return index
    return None


RUN_BOUND_REASON = (
    f"this charge takes the run's known spend past {RUN_BOUND_TEXT} or a token count past "
    f"{MAX_RUN_TOKENS:.0e} (the ledger's per-run bound): it and every later charge of the run "
    f"are counted as invocations of unknown cost, without tokens")


def no_nul(value: object) -> object:
    """NUL cannot be stored in a PostgreSQL text column; a JSON string may carry one
    (\\u0000). It becomes U+FFFD in derived text on every database, so SQLite and
    PostgreSQL ledgers agree; the event's raw line keeps the exact escape."""
    return value.replace("\x00", "\ufffd") if isinstance(value, str) else value
