"""A real notebook, run by a real Jupyter kernel (nbclient + ipykernel): a stream scaled by
hand twice, its info (segment table and scaling picture coloured by data rate), a slice in
pandas, tier 2's status, a reader group with two readers and their lag, a transaction and a
StreamCut. The test reads the cells' rendered outputs as Jupyter would show them and checks
what a person needs is there: ``number#epoch`` names, the legend with units, lag figures, no
errors. ``build_notebook`` is also how the pictures in docs/journeys/notebook.md were made."""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

KERNEL = "pe-test-python"  # a kernelspec of this very interpreter (see kernel_env)
SVG = "{http://www.w3.org/2000/svg}"

CELLS = [
    # a store with a stream of two segments; sensors 0-3 are busy, the rest quiet
    '''import time
import pravega_embedded as pe
store = pe.open(STORE_PATH)
store.create_scope("iot")
store.create_stream("iot", "sensors", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2)))
w = store.create_writer("iot", "sensors", serializer="json")

def load(n, busy=4, quiet=16):
    for i in range(n):
        s = i % busy if i % 5 else busy + i % quiet   # four fifths go to the busy sensors
        w.write_event({"sensor": s, "t": 20 + i % 7}, routing_key=f"sensor-{s}")
    w.flush()

load(2000)
time.sleep(0.4)''',
    # split the busiest segment, write, and again
    '''for _ in range(2):
    hot = max(store.stream_info("iot", "sensors").current_segments, key=lambda s: s.length)
    mid = (hot.key_low + hot.key_high) / 2
    store.scale_stream("iot", "sensors", seal=[hot.segment_id],
                       new_ranges=[(hot.key_low, mid), (mid, hot.key_high)])
    load(3000)
    time.sleep(0.4)
info = store.stream_info("iot", "sensors")
info''',
    # the slice as pandas: a readable segment column beside the numeric id
    '''df = store.read_slice("iot", "sensors").to_pandas()
df.head(3)''',
    'df.groupby("segment").size().to_frame("events")',
    # tier 2
    '''store.flush_tier2(timeout=30)
store.tiering_status()''',
    # a reader group, two readers, some events read
    '''group = store.create_reader_group("dashboard", "iot", "sensors")
r1, r2 = group.create_reader("r1"), group.create_reader("r2")
for _ in range(300):
    r1.read_next_event(timeout=0.2)
    r2.read_next_event(timeout=0.2)
group''',
    "group.unread_bytes()",
    # a transaction, and the writer's open transactions
    '''tw = store.create_transactional_writer("iot", "sensors", writer_id="batch-7")
txn = tw.begin_txn(lease=60)
for i in range(10):
    txn.write_event(b"staged %d" % i, routing_key=f"sensor-{i}")
txn.flush()
txn''',
    "tw",
    # a StreamCut
    "store.stream_info('iot', 'sensors').tail",
    "store.close()",
]


def build_notebook(store_path: str) -> "nbformat.NotebookNode":
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(f"STORE_PATH = {store_path!r}")]
    nb.cells += [nbformat.v4.new_code_cell(src) for src in CELLS]
    nb.metadata["kernelspec"] = {"name": KERNEL, "display_name": "Python (pravega_embedded tests)",
                                 "language": "python"}
    return nb


def kernel_env(root, monkeypatch) -> None:
    """A kernelspec that runs ``sys.executable`` (the venv's interpreter), found first through
    JUPYTER_PATH; Jupyter's and IPython's state go to ``root`` too, not the home directory."""
    spec = root / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python (pravega_embedded tests)", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(root / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(root / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(root / "ipython"))


def run_notebook(tmp_path, monkeypatch) -> "nbformat.NotebookNode":
    kernel_env(tmp_path, monkeypatch)
    nb = build_notebook(str(tmp_path / "data"))
    client = nbclient.NotebookClient(nb, kernel_name=KERNEL, timeout=60,
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    return nb


def shown(cell) -> str:
    """What Jupyter shows for a cell's value: its text/html (else its text/plain)."""
    out = [o for o in cell.outputs if o.output_type == "execute_result"]
    assert len(out) == 1, cell.outputs
    data = out[0]["data"]
    return data.get("text/html") or data["text/plain"]


def cells_text(html: str) -> list[str]:
    return [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", html, re.S)]


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    monkeypatch = pytest.MonkeyPatch()
    try:
        yield run_notebook(tmp_path_factory.mktemp("nb"), monkeypatch)
    finally:
        monkeypatch.undo()


def test_no_cell_fails(executed):
    for cell in executed.cells:
        assert not [o for o in cell.outputs if o.output_type == "error"], cell.outputs
        assert not [o for o in cell.outputs if o.output_type == "stream" and o.name == "stderr"], cell.outputs


def test_stream_info_table_and_picture(executed):
    html = shown(executed.cells[2])
    assert "<b>Stream</b> iot/sensors" in html and "epoch 2, 4 open segments" in html
    tds = cells_text(html)
    # every segment as number#epoch: the two of epoch 0, two of each split
    for name in ("0#0", "1#0", "2#1", "3#1", "4#2", "5#2"):
        assert name in tds
    assert "data rate" in html and re.search(r"\d+(\.\d+)? (Ki|Mi)?B/s", html)
    svg = html[html.index("<svg"):html.index("</svg>") + 6]
    root = ET.fromstring(svg)
    boxes = [r for r in root.iter(f"{SVG}rect") if r.get("class") == "segment"]
    assert len(boxes) == 6
    assert {t.text for t in root.iter(f"{SVG}text") if t.get("class") == "segment-label"} >= {"0#0", "1#0"}
    fills = {r.get("fill") for r in boxes}
    assert len(fills) >= 3  # coloured by load, not by epoch
    [legend] = [g for g in root.iter(f"{SVG}g") if g.get("class") == "legend"]
    assert legend.get("data-by") == "rate"
    labels = [t.text for t in legend.iter(f"{SVG}text")]
    assert labels[0] == "data rate" and labels[1] == "0 B/s" and labels[-1].endswith("B/s")
    # the current epoch has a real width: up to now, not zero
    frame = next(r for r in root.iter(f"{SVG}rect") if r.get("class") == "frame")
    last_tick = max(float(ln.get("x1")) for ln in root.iter(f"{SVG}line") if ln.get("class") == "epoch")
    assert float(frame.get("x")) + float(frame.get("width")) - last_tick > 20
    times = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "time-label"]
    assert times[-1].startswith("+")


def test_pandas_frame_has_segment_names(executed):
    head = shown(executed.cells[3])
    columns = re.findall(r"<th>([a-z_]+)</th>", head)
    assert columns == ["event", "routing_key", "segment_id", "segment", "offset"]
    assert re.search(r"<td>\d+</td>\s*<td>\d+#\d+</td>", head)  # the id, then its name
    html = shown(executed.cells[4])
    assert "events" in html
    names = set(re.findall(r"<th>(\d+#\d+)</th>", html))
    assert names == {"0#0", "1#0", "2#1", "3#1", "4#2", "5#2"} - _empty_segments(executed)


def _empty_segments(executed) -> set[str]:
    """Segments the notebook's writes left empty (a split can leave a half without keys)."""
    tds = cells_text(shown(executed.cells[2]))
    rows = [tds[i:i + 9] for i in range(0, len(tds), 9)]
    return {r[0] for r in rows if r[4] == "0"}


def test_tiering_status(executed):
    html = shown(executed.cells[5])
    assert "<b>Tier 2</b>" in html and ">ok<" in html
    tds = cells_text(html)
    assert tds[tds.index("untiered") + 1] == "0 B"
    assert int(tds[tds.index("files") + 1].replace(",", "")) >= 1


def test_reader_group_distribution_and_lag(executed):
    html = shown(executed.cells[6])
    assert "<b>ReaderGroup</b> dashboard on iot/sensors: 2 readers" in html
    m = re.search(r"lag ([\d,]+) events \(([\d,]+) bytes\)", html)
    events, nbytes = (int(g.replace(",", "")) for g in m.groups())
    assert 0 < events < 8000 - 300  # 8000 written, at least 300 of them read
    assert nbytes == int(shown(executed.cells[7]))  # the same lag as group.unread_bytes()
    tds = cells_text(html)
    rows = {tds[i]: tds[i:i + 5] for i in range(0, len(tds), 5)}
    assert {"r1", "r2"} <= set(rows)
    # the readers' lag and the rest (no reader) add up to the group's
    assert sum(int(r[3].replace(",", "")) for r in rows.values()) == events
    assert sum(int(r[4].replace(",", "")) for r in rows.values()) == nbytes
    held = [n for rid in ("r1", "r2") for n in rows[rid][1].split(", ")]
    assert held and all(re.fullmatch(r"\d+#\d+", n) for n in held)


def test_transaction_and_writer(executed):
    txn, writer = shown(executed.cells[8]), shown(executed.cells[9])
    assert "<b>Transaction</b> on iot/sensors" in txn and ">OPEN<" in txn
    tds = cells_text(txn)
    assert tds[2] == "batch-7" and int(tds[3].replace(",", "")) > 0 and tds[4].endswith("of 60 s")
    assert "<b>TransactionalEventStreamWriter</b> &#x27;batch-7&#x27; on iot/sensors: 1 open transaction" in writer
    assert cells_text(writer)[0] == tds[0]  # the same transaction id


def test_stream_cut(executed):
    html = shown(executed.cells[10])
    assert "<b>StreamCut</b> iot/sensors" in html and "pe1:iot/sensors:" in html
    names = [t for t in cells_text(html) if "#" in t]
    assert len(names) == 4 and set(names) <= {"0#0", "1#0", "2#1", "3#1", "4#2", "5#2"}
