"""``--graph NAME`` on a reading command: which runs' graphs it names, checked against the
ledger, and the SQL condition that keeps those runs."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..backend import bind_list, reading
from ..errors import BadArgument

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

# The key of a run with no graph (a plan refused, or a planner killed before it committed
# one), as `cost --by graph` and `--by node` write it; `--graph "(no graph)"` selects them.
NO_GRAPH = "(no graph)"


def graph_names_of(engine: Engine, given: Iterable[str]) -> tuple[str, ...]:
    """The graph names ``--graph`` gives, each one a graph some run of the ledger has. One
    that none has is a usage error naming the closest there are: a filter that matched
    nothing would print an empty table, or $0, as if that were the answer."""
    given = tuple(dict.fromkeys(given))
    if not given:
        return ()
    with reading(engine) as reader:
        names = {name for (name,) in reader.rows("SELECT DISTINCT graph_name FROM runs")}
    known = {NO_GRAPH if name is None else name for name in names}
    for name in given:
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=3, cutoff=0.6)
            hint = (f"did you mean {' or '.join(repr(c) for c in close)}?" if close
                    else f"the ledger's runs have {len(known)} graph(s)")
            raise BadArgument(f"--graph {name!r} is no graph of this ledger's runs: {hint} "
                              f"(`omg-ledger cost --by graph` lists them)")
    return given


def graph_condition(column: str, graphs: tuple[str, ...], params: dict) -> str:
    """SQL that holds where ``column`` (a runs.graph_name) is one of ``graphs``."""
    named = [name for name in graphs if name != NO_GRAPH]
    parts = [f"{column} IN {bind_list(params, 'graph', named)}"] if named else []
    if NO_GRAPH in graphs:
        parts.append(f"{column} IS NULL")
    return "(" + " OR ".join(parts) + ")"
