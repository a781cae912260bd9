"""Notebook: how the library's objects look in Jupyter, and the segment column of pandas frames.

Owns: the HTML that ``_repr_html_`` returns for a StreamInfo (segment table beside the scaling
picture), a reader group (segments and lag per reader), a transaction and a transactional
writer's open transactions, and tier 2's status; the small table helper they share; and
``segment_frame``, which turns a slice's Arrow table into a pandas frame with a readable
``segment`` column (``number#epoch``) beside the numeric ``segment_id``. The objects gather
their state; the functions here only lay it out.

Invariants:
  1. Every text that comes from a user or the disk (names, ids, errors, URLs) goes through
     ``html.escape``; numbers are formatted here. A cell passed as ``Html`` is already markup.
  2. Segments are shown as ``segment_name`` (``number#epoch``, ``0#0`` included).
  3. ``segment_frame`` changes no column of the Arrow table: it inserts ``segment`` right after
     ``segment_id`` (nothing when the table has no ``segment_id``). The Arrow schema, which
     Spark and tier 2 share, stays as it is.

Thread-safety: pure functions over values the caller gathered; safe from any thread.
"""

from __future__ import annotations

import html
import importlib.util
import time
from typing import TYPE_CHECKING, Any, Iterable, Mapping, NamedTuple, Sequence

from .history import amount, history_svg, ink, load_colour, segment_loads
from .readergroup.config import split_seg_key
from .streamcut import segment_name

if TYPE_CHECKING:
    import pandas
    import pyarrow

__all__ = ["Html", "table", "segment_frame", "stream_info_html", "reader_group_html", "TxnView",
           "txn_view", "transaction_html", "transactions_html", "tiering_html"]

_LEFT = "text-align:left"
_RIGHT = "text-align:right;font-variant-numeric:tabular-nums"


class Html(str):
    """A table cell that is markup already (not escaped again)."""


def _cell(value: object, right: bool, wrap: bool, tag: str = "td", style: str = "") -> str:
    text = value if isinstance(value, Html) else html.escape(str(value))
    css = (_RIGHT if right else _LEFT) + ("" if wrap else ";white-space:nowrap") + (f";{style}" if style else "")
    return f"<{tag} style='{css}'>{text}</{tag}>"


def table(header: Sequence[str] | None, rows: Iterable[Sequence[object]], right: Iterable[int] = (),
          styles: Mapping[tuple[int, int], str] | None = None, wrap: Iterable[int] = ()) -> str:
    """An HTML table: ``header`` names (None: no header row), then ``rows``; columns in
    ``right`` (numbers) are right-aligned, the others left-aligned (Jupyter right-aligns every
    cell by default); only the columns in ``wrap`` break lines. ``styles`` adds CSS to the cell
    at (row, column)."""
    right, wrap = set(right), set(wrap)
    styles = styles or {}
    head = "" if header is None else "".join(_cell(h, i in right, False, "th") for i, h in enumerate(header))
    body = "".join(
        "<tr>" + "".join(_cell(v, j in right, j in wrap, style=styles.get((i, j), ""))
                         for j, v in enumerate(row)) + "</tr>"
        for i, row in enumerate(rows)
    )
    thead = f"<thead><tr>{head}</tr></thead>" if head else ""
    return f"<table class='pe-table'>{thead}<tbody>{body}</tbody></table>"


def _title(kind: str, name: str, rest: str = "") -> str:
    """``<b>kind</b> name rest`` (``rest`` is markup)."""
    return f"<b>{kind}</b> {html.escape(name)}{rest}"


def _ago(ns: int, now_ns: int) -> str:
    s = max(0.0, (now_ns - ns) / 1e9)
    return f"{s:.1f} s ago" if s < 120 else f"{s / 60:.0f} min ago" if s < 7200 else f"{s / 3600:.1f} h ago"


# ------------------------------------------------------------------ pandas
def segment_frame(t: "pyarrow.Table") -> "pandas.DataFrame":
    """``t.to_pandas()`` with a ``segment`` column (``number#epoch``) after ``segment_id``
    (invariant 3)."""
    if importlib.util.find_spec("pandas") is None:
        raise ImportError("to_pandas() needs pandas: pip install 'pravega-embedded[pandas]'")
    df = t.to_pandas()
    if "segment_id" in df.columns and "segment" not in df.columns:
        ids = df["segment_id"]
        names = {int(sid): segment_name(int(sid)) for sid in ids.unique()}
        df.insert(df.columns.get_loc("segment_id") + 1, "segment", ids.map(names).astype(object))
    return df


# ------------------------------------------------------------------ streams
def stream_info_html(info: Any, *, now_ns: int) -> str:
    """A StreamInfo: a heading, one row per segment (name, key range, epochs, head, bytes,
    events, data rate coloured as in the picture, state, successors), then the scaling
    picture when the stream has scaled."""
    loads = segment_loads(info, now_ns, "rate")
    epoch = info.history[-1].epoch if info.history else 0
    rows, styles = [], {}
    for i, s in enumerate(sorted(info.segments, key=lambda s: s.segment_id)):
        first, last = loads.epochs[s.segment_id]
        rate = loads.values[s.segment_id]
        rows.append((segment_name(s.segment_id), f"[{s.key_low:.4f}, {s.key_high:.4f})",
                     str(first) if first == (epoch if last is None else last) else
                     f"{first}-{epoch if last is None else last}",
                     f"{s.head:,}", f"{s.length:,}", "" if s.events is None else f"{s.events:,}",
                     "-" if rate is None else amount(rate, "B/s"), "sealed" if s.sealed else "open",
                     ", ".join(map(segment_name, s.successors))))
        fill = load_colour(None if rate is None else (rate / loads.top if loads.top > 0 else 0.0))
        styles[(i, 6)] = f"background:{fill};color:{ink(fill)}"
    current = info.current_segments
    heading = _title("Stream", f"{info.scope}/{info.stream}", html.escape(
        f"{' (sealed)' if info.sealed else ''}{' (byte stream)' if info.kind == 'bytes' else ''}: "
        f"epoch {epoch}, {len(current)} open segment{'s' if len(current) != 1 else ''}, "
        f"{amount(sum(s.length - s.head for s in info.segments))} from head to tail"))
    picture = f"<div>{history_svg(info, now_ns=now_ns)}</div>" if len(info.history) > 1 else ""
    return (heading + table(("segment", "key range", "epochs", "head", "bytes", "events", "data rate",
                             "state", "successors"), rows, right=(3, 4, 5, 6), styles=styles, wrap=(8,))
            + picture)


# ------------------------------------------------------------------ reader groups
def reader_group_html(name: str, streams: Sequence[str], held: Mapping[str, Sequence[str]],
                      lag: Mapping[str, tuple[int, int]], last_checkpoint: str | None,
                      outstanding: Sequence[str]) -> str:
    """A reader group: one row per reader with its segments and its lag (unread bytes and
    events in the segments it holds), and a row for the unread data no reader holds
    (unassigned segments and successors not reached yet). ``held``: reader -> segment keys;
    ``lag``: segment key -> (bytes, events) for every segment with data still to read."""
    one = len(streams) == 1

    def shown(k: str) -> str:
        skey, sid = split_seg_key(k)
        return segment_name(sid) if one else f"{skey}/{segment_name(sid)}"

    rows = []
    taken: set[str] = set()
    for rid, keys in held.items():
        taken.update(keys)
        b = sum(lag.get(k, (0, 0))[0] for k in keys)
        n = sum(lag.get(k, (0, 0))[1] for k in keys)
        rows.append((rid, ", ".join(shown(k) for k in sorted(keys, key=split_seg_key)) or "-",
                     len(keys), f"{n:,}", f"{b:,}"))
    rest = sorted((k for k in lag if k not in taken), key=split_seg_key)
    if rest or not rows:
        rows.append((Html("<i>no reader yet</i>"), ", ".join(shown(k) for k in rest) or "-", len(rest),
                     f"{sum(lag[k][1] for k in rest):,}", f"{sum(lag[k][0] for k in rest):,}"))
    total_b = sum(b for b, _ in lag.values())
    total_n = sum(n for _, n in lag.values())
    checkpoints = (f"last checkpoint {html.escape(repr(last_checkpoint))}" if last_checkpoint
                   else "no checkpoint yet")
    if outstanding:
        checkpoints += f", outstanding {html.escape(', '.join(outstanding))}"
    heading = _title("ReaderGroup", name, f" on {html.escape(', '.join(streams))}: {len(held)} "
                     f"reader{'s' if len(held) != 1 else ''}, lag {total_n:,} events "
                     f"({total_b:,} bytes); {checkpoints}")
    return heading + table(("reader", "segments", "count", "unread events", "unread bytes"), rows,
                           right=(2, 3, 4), wrap=(1,))


# ------------------------------------------------------------------ transactions
_TXN_COLOURS = {"OPEN": "#1f77b4", "COMMITTING": "#ff7f0e", "COMMITTED": "#2ca02c",
                "ABORTING": "#ff7f0e", "ABORTED": "#d62728"}
_TXN_HEADER = ("id", "status", "writer", "staged bytes", "lease left", "begun")


class TxnView(NamedTuple):
    """What a transaction's row shows (the fields of ``TransactionInfo``, same names)."""

    txn_id: str
    writer_id: str
    status: str
    created_ns: int
    lease: float
    deadline_ns: int
    staged_bytes: int


def txn_view(state: Any) -> TxnView:
    """The view of a transaction's shared state (``transactions._TxnState``): staged bytes
    count the events still buffered too."""
    staged = sum(seg.length for seg in list(state.staged.values())) + state.pending_bytes
    return TxnView(state.id.hex, state.writer_id, state.status.value, state.created_ns, state.lease,
                   state.deadline_ns, staged)


def _txn_row(t: Any, now_ns: int) -> tuple[object, ...]:
    colour = _TXN_COLOURS.get(t.status, "#444444")
    left = f"{max(0.0, (t.deadline_ns - now_ns) / 1e9):.1f} s of {t.lease:g} s" if t.status == "OPEN" else "-"
    return (Html(f"<code>{html.escape(str(t.txn_id))}</code>"),
            Html(f"<b style='color:{colour}'>{html.escape(t.status)}</b>"),
            t.writer_id, f"{t.staged_bytes:,}", left, _ago(t.created_ns, now_ns))


def transaction_html(stream_key: str, t: Any, now_ns: int | None = None) -> str:
    """One transaction (a TxnView or TransactionInfo): id, status, writer, staged bytes,
    lease left, age."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    return _title("Transaction", f"on {stream_key}") + table(_TXN_HEADER, [_txn_row(t, now_ns)], right=(3,))


def transactions_html(kind: str, name: str, txns: Sequence[Any], now_ns: int | None = None) -> str:
    """A list of transactions (TxnViews or TransactionInfos) of a ``kind`` of object (e.g. a
    writer) named ``name``, oldest first."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    n_open = sum(1 for t in txns if t.status == "OPEN")
    head = _title(kind, name, f": {n_open} open transaction{'s' if n_open != 1 else ''}")
    if not txns:
        return head
    rows = [_txn_row(t, now_ns) for t in sorted(txns, key=lambda t: t.created_ns)]
    return head + table(_TXN_HEADER, rows, right=(3,))


# ------------------------------------------------------------------ tier 2
_TIER_COLOURS = {"ok": "#2ca02c", "retrying": "#ff7f0e", "blocked": "#d62728"}


def tiering_html(st: Any) -> str:
    """A TieringStatus: its state in colour, then one row per figure."""
    colour = _TIER_COLOURS.get(st.state, "#7f7f7f")
    budget = "no budget" if st.local_budget is None else f"of a {amount(st.local_budget)} budget"
    rows = [
        ("tiered", f"{st.tiered_bytes:,} B", f"{amount(st.tiered_bytes)} of segment data"),
        ("files", f"{st.files:,}", f"{amount(st.file_bytes)} of Parquet in tier 2"),
        ("untiered", f"{st.untiered_bytes:,} B", "committed, not in tier 2 yet"),
        ("lag", f"{st.lag_seconds:.1f} s", "age of the oldest untiered data"),
        ("local journal", f"{st.local_bytes:,} B", budget),
        ("failures", f"{st.failures:,}", "failed rounds in a row"),
    ]
    if st.pending_deletions:
        rows.append(("pending deletions", f"{st.pending_deletions:,}", "deleted streams still in tier 2"))
    if st.last_error is not None:
        rows.append(("last error", "", Html(f"<span style='color:#d62728'>{html.escape(st.last_error)}</span>")))
    return (_title("Tier 2", st.target, f": <b style='color:{colour}'>{html.escape(st.state)}</b>")
            + table(None, rows, right=(1,), wrap=(2,)))
