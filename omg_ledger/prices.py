"""The price book: list prices per runtime, used to estimate what unpriced work cost.

Pure: reading and checking a TOML file, and the arithmetic. Which file: ``--prices
FILE`` > ``$OMG_LEDGER_PRICES`` > ``prices.toml`` in the platform's config directory
(:func:`omg_ledger.paths.config_dir`: ``~/.config/omg-ledger`` on Linux) > the book
shipped in the package. One file is the whole book (no merging),
so an estimate always names the one file its prices came from.

Money stays exact: prices are read as Decimal and an estimate is rounded once, per
invocation, to integer nano-dollars (half to even).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import date
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

from .errors import BadArgument
from .reports.graphs import NO_GRAPH

ENV_PRICES = "OMG_LEDGER_PRICES"
SHIPPED = Path(__file__).with_name("prices.toml")
RATE_KEYS = ("input_per_mtok", "cached_input_per_mtok", "output_per_mtok", "reasoning_output_per_mtok")
_RUNTIME_KEYS = {*RATE_KEYS, "model", "source", "valid_from", "input_includes_cached", "output_includes_reasoning"}
_OVERRIDE_KEYS = {*RATE_KEYS, "model", "source"}
# $ per million tokens × tokens = micro-dollars; × 1000 = nano-dollars.
_NANOS_PER_MTOK_TOKEN = 1000

NO_TOKENS = "no tokens"
NO_PRICE = "no price"


@dataclass(frozen=True)
class Rates:
    """One runtime's price (or a graph/node override applied to it)."""

    runtime: str
    model: str
    source: str
    valid_from: date
    input_per_mtok: Decimal
    cached_input_per_mtok: Decimal
    output_per_mtok: Decimal
    reasoning_output_per_mtok: Decimal
    input_includes_cached: bool
    output_includes_reasoning: bool


@dataclass(frozen=True)
class PriceBook:
    path: str
    runtimes: dict[str, Rates]
    graphs: dict[str, dict] = field(default_factory=dict)
    nodes: dict[str, dict] = field(default_factory=dict)

    def rates_for(self, runtime: str | None, graph: str | None = None, node: str | None = None) -> Rates | None:
        """``runtime``'s rates with the overrides of ``graph`` (None: no graph) and of
        ``node``, a node id or `(planning)`-like key as `cost --by node` writes it."""
        base = self.runtimes.get(runtime) if runtime else None
        if base is None:
            return None
        override: dict = {}
        graph_key = NO_GRAPH if graph is None else graph
        if graph_key in self.graphs:
            override.update(self.graphs[graph_key])
        if node is not None and f"{graph_key}/{node}" in self.nodes:
            override.update(self.nodes[f"{graph_key}/{node}"])
        return replace(base, **override) if override else base

    def describe(self) -> dict:
        """What a report says about the book it used."""
        return {
            "path": self.path,
            "valid_from": {name: r.valid_from.isoformat() for name, r in sorted(self.runtimes.items())},
            "runtimes": {name: {"model": r.model, "source": r.source, "valid_from": r.valid_from.isoformat()}
                         for name, r in sorted(self.runtimes.items())},
            "graph_overrides": sorted(self.graphs),
            "node_overrides": sorted(self.nodes),
        }


def _price(value: object, where: str) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, (int, Decimal)):
        raise BadArgument(f"{where}: a price must be a number of dollars per million tokens, not {value!r}")
    price = Decimal(value)
    if not price.is_finite() or price < 0:
        raise BadArgument(f"{where}: a price must be a finite number >= 0, not {value}")
    return price


def _check_keys(table: Mapping, allowed: set[str], where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise BadArgument(f"{where}: unknown key(s) {', '.join(unknown)} (allowed: {', '.join(sorted(allowed))})")


def _runtime(name: str, table: object, where: str) -> Rates:
    if not isinstance(table, Mapping):
        raise BadArgument(f"{where}: [runtime.{name}] must be a table")
    _check_keys(table, _RUNTIME_KEYS, where)
    missing = sorted(_RUNTIME_KEYS - set(table))
    if missing:
        raise BadArgument(f"{where}: [runtime.{name}] lacks {', '.join(missing)}")
    valid_from = table["valid_from"]
    if not isinstance(valid_from, date) or hasattr(valid_from, "hour"):
        raise BadArgument(f"{where}: [runtime.{name}] valid_from must be a TOML date (2026-12-01)")
    flags = {}
    for key in ("input_includes_cached", "output_includes_reasoning"):
        if not isinstance(table[key], bool):
            raise BadArgument(f"{where}: [runtime.{name}] {key} must be true or false")
        flags[key] = table[key]
    for key in ("model", "source"):
        if not isinstance(table[key], str) or not table[key].strip():
            raise BadArgument(f"{where}: [runtime.{name}] {key} must be a non-empty string")
    return Rates(runtime=name, model=table["model"], source=table["source"], valid_from=valid_from,
                 **{k: _price(table[k], f"{where}: [runtime.{name}] {k}") for k in RATE_KEYS}, **flags)


def _overrides(kind: str, tables: object, where: str) -> dict[str, dict]:
    if tables is None:
        return {}
    if not isinstance(tables, Mapping):
        raise BadArgument(f"{where}: [{kind}] must hold tables such as [{kind}.\"name\"]")
    out = {}
    for name, table in tables.items():
        label = f'[{kind}."{name}"]'
        if not isinstance(table, Mapping):
            raise BadArgument(f"{where}: {label} must be a table")
        _check_keys(table, _OVERRIDE_KEYS, f"{where}: {label}")
        values: dict = {}
        for key, value in table.items():
            if key in RATE_KEYS:
                values[key] = _price(value, f"{where}: {label} {key}")
            elif not isinstance(value, str):
                raise BadArgument(f"{where}: {label} {key} must be a string")
            else:
                values[key] = value
        out[name] = values
    return out


def parse_book(text: str, path: str) -> PriceBook:
    import tomllib

    try:
        data = tomllib.loads(text, parse_float=Decimal)
    except tomllib.TOMLDecodeError as exc:
        raise BadArgument(f"price book {path} is not valid TOML: {exc}") from None
    _check_keys(data, {"schema", "runtime", "graph", "node"}, f"price book {path}")
    if data.get("schema") != 1:
        raise BadArgument(f"price book {path}: schema = 1 expected, found {data.get('schema')!r}")
    runtimes = data.get("runtime")
    if not isinstance(runtimes, Mapping) or not runtimes:
        raise BadArgument(f"price book {path}: no [runtime.<name>] table")
    where = f"price book {path}"
    return PriceBook(path=path, runtimes={name: _runtime(name, t, where) for name, t in runtimes.items()},
                     graphs=_overrides("graph", data.get("graph"), where),
                     nodes=_overrides("node", data.get("node"), where))


def book_path(flag: str | None = None) -> Path:
    """Which file is the price book (see the module docstring)."""
    if flag:
        return Path(flag).expanduser()
    if os.environ.get(ENV_PRICES):
        return Path(os.environ[ENV_PRICES]).expanduser()
    from .paths import config_dir

    user = Path(config_dir()) / "prices.toml"
    return user if user.is_file() else SHIPPED


def load_book(flag: str | None = None) -> PriceBook:
    from .files import read_text_file

    path = book_path(flag)
    try:
        text = read_text_file(path, "price book", stream=True)
    except (OSError, UnicodeDecodeError) as exc:
        raise BadArgument(f"cannot read price book {path}: {getattr(exc, 'strerror', None) or exc}") from None
    return parse_book(text, str(path))


def _tokens(charge: Mapping) -> tuple[int, int, int, int]:
    return tuple(int(charge.get(k) or 0) for k in  # type: ignore[return-value]
                 ("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens"))


def _node_key(charge: Mapping) -> str | None:
    """The charge's node as `cost --by node` keys it: its node id, or for spend of no node
    (a planner's, a refused plan's, an assessment's) its kind in parentheses."""
    if charge.get("node_id") is not None:
        return charge["node_id"]
    kind = charge.get("charge_kind", charge.get("kind"))
    return f"({kind})" if kind else None


def _rates(book: PriceBook, charge: Mapping) -> Rates | None:
    return book.rates_for(charge.get("runtime"), charge.get("graph"), _node_key(charge))


def why_not(book: PriceBook, charge: Mapping) -> str | None:
    """None when `charge` can be estimated, else the reason (NO_TOKENS or NO_PRICE)."""
    if not any(_tokens(charge)):
        return NO_TOKENS
    if _rates(book, charge) is None:
        return NO_PRICE
    return None


def cost_nanos(rates: Rates, input_tokens: int, cached_input_tokens: int, output_tokens: int,
               reasoning_output_tokens: int) -> int:
    """The formula stated in prices.toml, rounded once to nano-dollars."""
    fresh = max(input_tokens - cached_input_tokens, 0) if rates.input_includes_cached else input_tokens
    plain = max(output_tokens - reasoning_output_tokens, 0) if rates.output_includes_reasoning else output_tokens
    micro = (fresh * rates.input_per_mtok + cached_input_tokens * rates.cached_input_per_mtok
             + plain * rates.output_per_mtok + reasoning_output_tokens * rates.reasoning_output_per_mtok)
    return int((micro * _NANOS_PER_MTOK_TOKEN).to_integral_value(ROUND_HALF_EVEN))


def estimate(book: PriceBook, charge: Mapping) -> int | None:
    """Estimated nano-dollars of one charge (a mapping with runtime, graph, node_id and
    the four token counts), or None when it has no tokens or its runtime no price."""
    if why_not(book, charge) is not None:
        return None
    rates = _rates(book, charge)
    assert rates is not None
    return cost_nanos(rates, *_tokens(charge))
