"""What the power-cut child (pc_child.py) and the checkers (pc_check.py) share: names, store
options, the events and bytes each workload writes (pure functions of their identity, so every
byte read back is checked) and the parser of the acknowledgement log.

Ack log: one line per acknowledgement, written with one ``os.write`` on an O_APPEND file on the
real disk (outside LazyFS), so neither a SIGKILL nor a LazyFS cut loses it. Every line is
``<tag> <fields...>``; a run starts with ``ready <workload> <seed>``. A child thread that fails
logs ``error <text>`` and the child exits with status 3.
"""

from __future__ import annotations

import functools
import json
import os
import random
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

WORKLOADS = ("writes", "scaling", "txn", "truncate", "large", "bytes", "createdelete")
SCOPE = "pc"
STREAM = "s"  # the event stream of writes, scaling, truncate, large, createdelete ("live")
TXN_STREAM = "t"
PROBE_STREAM = "probe"  # written by the checkers only (the store keeps working)
BYTE_STREAMS = ("b0", "b1")
CD_PREFIX = "cd"  # scopes created and deleted by the createdelete workload
MiB = 1 << 20

ACK_TAGS = frozenset({"A", "scaled", "committed", "aborted", "TA", "B", "C", "D"})
NOT_DURABLE = "o"  # prefix of the acknowledgement lines of a child whose durability is not "fsync"


def durability() -> str:
    """The child's durability: "fsync" (the default), or PC_DURABILITY."""
    return os.environ.get("PC_DURABILITY", "fsync")


def store_options() -> dict:
    """Options of the child's store: durability "fsync" (unless PC_DURABILITY says otherwise),
    frequent checkpoints (LMDB commits, each with fsyncs of data.mdb) and small journal files
    (frequent rolls). The journal file size can be raised with PC_ROLL_BYTES (torn faults aim at
    one file)."""
    return {"durability": durability(),
            "checkpoint_interval": 0.05,
            "roll_bytes": int(os.environ.get("PC_ROLL_BYTES", str(MiB))),
            "maintenance_interval": 0.05,
            "retention_interval": 0.05}


# ------------------------------------------------------------------------ keyed events
_PATTERN = bytes((i * 31 + 7) & 0xFF for i in range(256 + 4096))
GROUP = 50  # consecutive sequence numbers sharing a routing key (an atomic batch is one group)


def key_of(wid: str, seq: int) -> str:
    """The routing key of a writer's event ``seq``: one writer owns its keys, so per-key order
    is sequence order."""
    return f"{wid}-k{(seq // GROUP) % 7}"


def size_of(seq: int) -> int:
    """Mostly small events, now and then one of 40-200 KiB (a record of several FUSE writes)."""
    if seq % 97 == 13:
        return 40_000 + (seq * 7919) % 160_000
    return (seq * 7919) % 3000


def payload(wid: str, seq: int) -> bytes:
    """The event (writer, seq): a header naming it, then a pattern depending on seq."""
    head = f"{wid}:{seq}:{key_of(wid, seq)}:".encode()
    n = size_of(seq)
    start = (seq * 13) & 0xFF
    body = _PATTERN[start:start + min(n, 4096)]
    if n > 4096:
        body = (body * (n // len(body) + 1))[:n]
    return head + body


def parse(event: bytes) -> tuple[str, int]:
    """(writer, seq) of an event written by ``payload``; AssertionError if it is damaged."""
    try:
        wid_b, seq_b, _ = event.split(b":", 2)
        wid, seq = wid_b.decode(), int(seq_b)
    except ValueError as exc:
        raise AssertionError(f"unparsable event {event[:60]!r}") from exc
    if event != payload(wid, seq):
        raise AssertionError(f"damaged event {wid}:{seq} ({len(event)} bytes)")
    return wid, seq


# ------------------------------------------------------------------------ large events
_PERIOD = 65521  # a prime: no two chunks of a large event hold the same bytes


def is_large(seq: int) -> bool:
    return seq % 3 == 0


def large_size(seq: int) -> int:
    """9-17 MiB for a large event (over the 8 MiB record limit), 40-440 B for a small one."""
    if not is_large(seq):
        return 40 + (seq * 37) % 400
    return 9 * MiB + (seq * 7919 * 1021) % (8 * MiB)


@functools.lru_cache(maxsize=8)
def _block(seed: int) -> bytes:
    return random.Random(seed).randbytes(_PERIOD)


def large_payload(seq: int) -> bytes:
    n = large_size(seq)
    head = f"L{seq}:{n}:".encode()
    block = _block(seq)
    reps = (n - len(head)) // _PERIOD + 1
    return head + (block * reps)[: n - len(head)]


def large_key(seq: int) -> str | None:
    return None if seq % 5 == 4 else f"k{seq % 3}"


# ------------------------------------------------------------------------ byte streams
def stream_bytes(name: str, start: int, end: int) -> bytes:
    """Bytes [start, end) of byte stream ``name``: a function of the offset only, so a
    resumed writer continues the same content and every byte read back is checked."""
    block = _block(hash_name(name))
    out = bytearray()
    pos = start
    while pos < end:
        i = pos % _PERIOD
        take = min(_PERIOD - i, end - pos)
        out += block[i:i + take]
        pos += take
    return bytes(out)


def hash_name(name: str) -> int:
    return int.from_bytes(name.encode(), "big") % 1_000_003 + 17


# ------------------------------------------------------------------------ transactions
TXN_EVENTS, TXN_KEYS, TXN_KEYLESS, TXN_SIZE = 60, 8, 6, 300


def txn_key(j: int) -> str | None:
    return None if j < TXN_KEYLESS else f"k{j % TXN_KEYS}"


def txn_payload(tag: str, j: int) -> bytes:
    """Event j of transaction ``tag``: ``tag|key|j|filler``."""
    key = txn_key(j)
    head = f"{tag}|{'-' if key is None else key}|{j}|".encode()
    return head + bytes((j + i) & 0xFF for i in range(max(0, TXN_SIZE - len(head))))


def txn_parse(event: bytes) -> tuple[str, int]:
    try:
        tag_b, _, j_b, _ = event.split(b"|", 3)
        tag, j = tag_b.decode(), int(j_b)
    except ValueError as exc:
        raise AssertionError(f"unparsable transactional event {event[:60]!r}") from exc
    if event != txn_payload(tag, j):
        raise AssertionError(f"damaged transactional event {tag}/{j}")
    return tag, j


# ------------------------------------------------------------------------ the ack log
@dataclass
class AckLog:
    """Everything the children acknowledged, over all runs.

    - ``A <writer> <seq>``: the writer's events up to seq are durable (flush returned);
    - ``scaling <epoch>`` / ``scaled <epoch>``: a scale began / returned;
    - ``begin <tag> <txn id>``, ``committing <tag>``, ``committed <tag>``, ``aborting <tag>``,
      ``aborted <tag>``: transaction steps, each logged once the call returned (``committing``
      and ``aborting`` just before the call);
    - ``TB <n> <json {writer: {key: max seq read}}>`` / ``TA <n>``: a truncation at a cut after
      those events began / returned;
    - ``B <stream> <offset>``: the byte stream holds [0, offset) durably (flush returned);
    - ``CB <name>`` / ``C <name>`` / ``DB <name>`` / ``D <name>``: scope ``name`` (with stream
      ``x`` and a few events of writer ``name``) creation began / returned, deletion began /
      returned.

    A child with another durability than "fsync" prefixes its acknowledgement lines (ACK_TAGS)
    with "o" (``oA w0 17``): they promise nothing after a power cut, so they are only counted
    (``not_durable``). Its other lines count as usual (what began may be visible).
    """

    lines: int = 0
    runs: int = 0
    errors: list[str] = field(default_factory=list)
    acked: dict[str, int] = field(default_factory=dict)
    ack_lines: int = 0
    scaling: int = 0
    scaled: int = 0
    begun: dict[str, str] = field(default_factory=dict)
    committing: set[str] = field(default_factory=set)
    committed: set[str] = field(default_factory=set)
    aborting: set[str] = field(default_factory=set)
    aborted: set[str] = field(default_factory=set)
    trunc_begun: dict[str, dict[str, int]] = field(default_factory=lambda: defaultdict(dict))
    trunc_acked: int = 0
    bytes_acked: dict[str, int] = field(default_factory=dict)
    cd: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    not_durable: int = 0

    @classmethod
    def read(cls, path: Path) -> "AckLog":
        log = cls()
        if not path.exists():
            return log
        data = path.read_bytes()
        for raw in data.split(b"\n")[:-1]:  # a last line without its newline is incomplete
            log.add(raw.decode(errors="replace"))
        return log

    def add(self, line: str) -> None:
        parts = line.split(" ", 2)
        if not parts or not parts[0]:
            return
        self.lines += 1
        tag = parts[0]
        if tag.startswith(NOT_DURABLE) and tag[len(NOT_DURABLE):] in ACK_TAGS:
            self.not_durable += 1
        elif tag == "ready":
            self.runs += 1
        elif tag == "error":
            self.errors.append(line)
        elif tag == "A":
            self.acked[parts[1]] = max(self.acked.get(parts[1], -1), int(parts[2]))
            self.ack_lines += 1
        elif tag == "scaling":
            self.scaling = max(self.scaling, int(parts[1]))
        elif tag == "scaled":
            self.scaled = max(self.scaled, int(parts[1]))
            self.ack_lines += 1
        elif tag == "begin":
            self.begun[parts[1]] = parts[2]
        elif tag in ("committing", "committed", "aborting", "aborted"):
            getattr(self, tag).add(parts[1])
            self.ack_lines += tag in ("committed", "aborted")
        elif tag == "TB":
            for wid, keys in json.loads(parts[2]).items():
                mine = self.trunc_begun[wid]
                for key, seq in keys.items():
                    mine[key] = max(mine.get(key, -1), seq)
        elif tag == "TA":
            self.trunc_acked += 1
            self.ack_lines += 1
        elif tag == "B":
            self.bytes_acked[parts[1]] = max(self.bytes_acked.get(parts[1], 0), int(parts[2]))
            self.ack_lines += 1
        elif tag in ("CB", "C", "DB", "D"):
            self.cd[parts[1]].append(tag)
            self.ack_lines += tag in ("C", "D")
        else:
            self.errors.append(f"unknown ack line {line!r}")
