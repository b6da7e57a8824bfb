"""Spend limits: what they are and where they come from (pure; checked in reports/limits.py).

A limit is a period (day, week from Monday, month, cut in --tz) and a scope: all spend,
one graph, one runtime or one node (``<graph>/<node id>``, as ``cost --by node`` keys it).

Graph names (free text) and node ids (a spliced fragment's ``top/core``) may both hold
``/``, so ``GRAPH/NODE`` names the node ``cost --by node`` keys so; when that key is two
nodes' (graph ``a/b`` node ``c``, graph ``a`` node ``b/c``) the limit is refused, and
``"GRAPH"/NODE`` (a ``"`` in GRAPH doubled) names the one: ``node:"a/b"/c/day=1``.

On the command line: ``[SCOPE/]PERIOD=USD``, e.g. ``day=50``, ``month=800``,
``graph:nightly-refactor/day=5``, ``runtime:codex/week=100``, ``node:g/review/day=1``.

In the config file (``$OMG_LEDGER_CONFIG``, else ``config.toml`` in the platform's config
directory, :func:`omg_ledger.paths.config_dir`: ``~/.config/omg-ledger`` on Linux)::

    [limits]
    day = 50
    month = 800

    [limits.graph."nightly-refactor"]
    day = 5

    [limits.runtime.codex]
    week = 100

    [limits.node."nightly-refactor/review"]
    day = 1

    [limits.node.'"team/nightly"/review']
    day = 1

Flags add to the file's limits; a flag for the same scope and period replaces the file's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

from .bounds import MAX_RUN_NANOS
from .errors import BadArgument
from .units import NANOS_PER_USD

ENV_CONFIG = "OMG_LEDGER_CONFIG"
PERIODS = ("day", "week", "month")
SCOPES = ("graph", "runtime", "node")
# A run's known spend is bounded there; a limit above it guards nothing, and would reach
# float conversions that overflow.
MAX_LIMIT_USD = MAX_RUN_NANOS // NANOS_PER_USD
_SPEC_HELP = "use [SCOPE/]PERIOD=USD, e.g. day=50, month=800, graph:nightly-refactor/day=5 (PERIOD: day, week, month)"
_QUOTED_HELP = 'a quoted graph is node:"GRAPH"/NODE, a " in GRAPH doubled'


@dataclass(frozen=True)
class Limit:
    period: str
    amount_nano_usd: int
    scope: str | None = None  # None = all spend; else one of SCOPES
    name: str | None = None

    @property
    def label(self) -> str:
        return self.period if self.scope is None else f"{self.scope}:{self.name}/{self.period}"

    @property
    def key(self) -> tuple:
        return (self.scope, self.name, self.period)


def _amount(value: object, where: str) -> int:
    if isinstance(value, bool):
        raise BadArgument(f"{where}: a limit is a number of dollars, not {value!r}")
    try:
        usd = Decimal(str(value))
    except InvalidOperation:
        raise BadArgument(f"{where}: a limit is a number of dollars, not {value!r}") from None
    if not usd.is_finite():
        raise BadArgument(f"{where}: a limit is a finite number of dollars, not {value}")
    if usd <= 0:
        raise BadArgument(f"{where}: a limit must be more than $0, not {value}")
    if usd > MAX_LIMIT_USD:  # compared before any arithmetic: 1e999999 overflows Decimal's context
        raise BadArgument(f"{where}: a limit is at most ${MAX_LIMIT_USD:,}, not {value}")
    nanos = usd * NANOS_PER_USD
    if nanos != nanos.to_integral_value():
        raise BadArgument(f"{where}: {value} has more than 9 decimals")
    return int(nanos)


def quote_graph(graph: str) -> str:
    """A graph name as a node limit's quoted graph."""
    return '"' + graph.replace('"', '""') + '"'


def node_parts(name: str) -> tuple[str, str] | None:
    """A node limit's ``"GRAPH"/NODE`` as (graph, node); None for ``GRAPH/NODE``, which
    names whichever node ``cost --by node`` keys so (reports/limits.py refuses it when
    that is more than one). ValueError: a quote that does not close, or no /NODE after it."""
    if not name.startswith('"'):
        return None
    graph, at = [], 1
    while True:
        end = name.find('"', at)
        if end < 0:
            raise ValueError("the graph's quote is never closed")
        graph.append(name[at:end])
        if not name.startswith('"', end + 1):
            break
        graph.append('"')  # "" inside the quotes is one "
        at = end + 2
    rest = name[end + 1:]
    if not rest.startswith("/") or rest == "/":
        raise ValueError("no /NODE after the quoted graph")
    return "".join(graph), rest[1:]


def _check_node_name(name: str, where: str) -> None:
    try:
        node_parts(name)
    except ValueError as exc:
        raise BadArgument(f"{where}: {exc}; {_QUOTED_HELP}") from None


def parse_limit(spec: str) -> Limit:
    """`[SCOPE/]PERIOD=USD` (see the module docstring)."""
    target, sep, amount = spec.partition("=")
    if not sep or not target.strip():
        raise BadArgument(f"cannot read limit {spec!r}: {_SPEC_HELP}")
    target = target.strip()
    scope_part, slash, period = target.rpartition("/")
    if period not in PERIODS:
        raise BadArgument(f"cannot read limit {spec!r}: unknown period {period!r}; {_SPEC_HELP}")
    if not slash:
        return Limit(period, _amount(amount.strip(), f"limit {spec!r}"))
    scope, colon, name = scope_part.partition(":")
    if not colon or scope not in SCOPES or not name:
        raise BadArgument(f"cannot read limit {spec!r}: the scope is graph:NAME, runtime:NAME or "
                          f"node:GRAPH/NODE; {_SPEC_HELP}")
    if scope == "node":
        _check_node_name(name, f"cannot read limit {spec!r}")
    return Limit(period, _amount(amount.strip(), f"limit {spec!r}"), scope, name)


def config_path() -> Path:
    if os.environ.get(ENV_CONFIG):
        return Path(os.environ[ENV_CONFIG]).expanduser()
    from .paths import config_dir

    return Path(config_dir()) / "config.toml"


def limits_from_config(path: Path | None = None) -> list[Limit]:
    """The [limits] table of the config file; none when the file does not exist."""
    import tomllib

    from .files import read_text_file

    path = path or config_path()
    try:
        text = read_text_file(path, "config file", stream=True)
    except FileNotFoundError:
        if os.environ.get(ENV_CONFIG):
            raise BadArgument(f"{ENV_CONFIG}={path} does not exist") from None
        return []
    except (OSError, UnicodeDecodeError) as exc:
        raise BadArgument(f"cannot read config file {path}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadArgument(f"config file {path} is not valid TOML: {exc}") from None
    table = data.get("limits", {})
    where = f"config file {path}: [limits]"
    if not isinstance(table, Mapping):
        raise BadArgument(f"{where} must be a table")
    out = []
    for key, value in table.items():
        if key in PERIODS:
            out.append(Limit(key, _amount(value, f"{where} {key}")))
        elif key in SCOPES and isinstance(value, Mapping):
            for name, periods in value.items():
                label = f'[limits.{key}."{name}"]'
                if key == "node":
                    _check_node_name(name, f"config file {path}: {label}")
                if not isinstance(periods, Mapping):
                    raise BadArgument(f"config file {path}: {label} must be a table of day/week/month = USD")
                for period, amount in periods.items():
                    if period not in PERIODS:
                        raise BadArgument(f"config file {path}: {label} unknown period {period!r} "
                                          f"(use day, week, month)")
                    out.append(Limit(period, _amount(amount, f"config file {path}: {label} {period}"), key, name))
        else:
            raise BadArgument(f"{where}: unknown key {key!r} (use day/week/month = USD, or "
                              f'[limits.graph."NAME"], [limits.runtime.NAME], [limits.node."GRAPH/NODE"])')
    return out


def resolve_limits(flags: tuple[str, ...] | list[str]) -> list[Limit]:
    """The config file's limits, then the flags' (a flag replaces the same scope and period)."""
    merged: dict[tuple, Limit] = {limit.key: limit for limit in limits_from_config()}
    for spec in flags:
        limit = parse_limit(spec)
        merged[limit.key] = limit
    return list(merged.values())
