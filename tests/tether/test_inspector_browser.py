"""The inspector end to end in a real headless Chromium (Debian's ``chromium`` and ``chromedriver``).

``tether inspect`` runs as the console script on a store the test wrote (a paused refund of the
demo's runner, a nested run's rows, a completed refund); the browser opens its printed address
(with the access token), reads the runs list and its filters, a nested run's timeline (each row
indented by its agent path's depth, with its replication state), a diff of two rows it picks, approves the pending run and sees
it reach its ``run_end``, then presses Approve again on a stale page and reads "already resumed".
A form posted without its CSRF token and a page asked for under a foreign host name are refused.
A topology's run (a Supervisor whose worker refunds after a manager's approval) is read row by row:
a tool's arguments and result and the final answer, folded per row; its pending gate is approved
from the pending list, which names the gate's agent path; a run approved without the runner says
it waits for a worker and which command finishes it. A screenshot of every page goes to ``$TETHER_ARTIFACTS/inspector/`` (default: the test's tmp
directory); nothing of it is committed. Both backends.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest
from _cli_support import RUNNER, TETHER, nested_rows, url_of
from conftest import Backend
from test_user_moves import app_folder

from actors import ActorSystem, Resume
from tether.lowlevel import demo_agent

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
TOKEN = "s3cret-token"
FOREIGN = "inspector.evil.example"


def _require_browser() -> None:
    if CHROMIUM and CHROMEDRIVER:
        return
    message = "Debian's chromium and chromium-driver are not installed (.ci/run installs them)"
    if os.environ.get("CI"):
        pytest.fail(f"{message}; in CI this is a failure", pytrace=False)
    pytest.skip(message)


async def _write(backend: Backend) -> None:
    store = backend.open()
    agent = demo_agent()
    async with store, ActorSystem(store, runners=[agent]) as system:
        done = await system.spawn(agent, "Refund order 1042, amount 20", execution_id="small-one")
        assert (await done.result(timeout=30)).status == "completed"
        rows = nested_rows("nested")
        for row in rows:
            await store.append(row)
        # Their outbox state, as a replicator leaves it: two rows sent, one quarantined.
        await store.mark_synced([rows[0].checkpoint_id, rows[1].checkpoint_id])
        await store.mark_quarantined({rows[2].checkpoint_id: "422: item too large"})
        for eid in ("approve-me", "keep-me"):
            ref = await system.spawn(agent, "Refund order 1042, amount 50000", execution_id=eid)
            assert (await ref.result(timeout=30)).status == "paused"


async def _write_topology(backend: Backend) -> None:
    """Runs of the user's topology ``topo_app.ops``: one approved and completed, one paused at its
    refund's gate, one approved without the runner (no worker drives it)."""
    import topo_app

    store = backend.open()
    async with store, ActorSystem(store, runners=[topo_app.ops]) as system:
        for eid in ("topo-done", "topo-handed", "topo-gate"):
            ref = await system.spawn(topo_app.ops, "please refund order 7", execution_id=eid)
            assert (await ref.result(timeout=30)).status == "paused"
        done = await system.resume(
            "topo-done", Resume(approved=True, metadata={"approver": "ann"}), timeout=30
        )
        assert done.status == "completed"
        await system.claim("topo-handed", Resume(approved=True))


@pytest.fixture
def inspector(store_backend: Backend, tmp_path: Path) -> Iterator[str]:
    """``tether inspect`` on the test's store; its base address (``http://127.0.0.1:PORT``)."""
    _require_browser()
    anyio.run(_write, store_backend)
    yield from _serve(store_backend, tmp_path, RUNNER)


@pytest.fixture
def topology_inspector(store_backend: Backend, tmp_path: Path) -> Iterator[str]:
    """``tether inspect --runner topo_app:ops`` run from the user's app folder, on a store of
    topology runs; its base address."""
    _require_browser()
    anyio.run(_write_topology, store_backend)
    yield from _serve(store_backend, app_folder(tmp_path), "topo_app:ops")


def _serve(backend: Backend, cwd: Path, runner: str) -> Iterator[str]:
    proc = subprocess.Popen(
        [str(TETHER), "inspect", "--port", "0", "--token", TOKEN, "--runner", runner],
        env={**os.environ, "TETHER_STORE": url_of(backend)},
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # bounded: the server prints it once started, or exits
        match = re.fullmatch(r"tether inspector on (http://127\.0\.0\.1:\d+)/\?token=(\S+)\n", line)
        assert match, (line, proc.poll(), proc.stderr.read() if proc.poll() is not None else "")
        assert match[2] == TOKEN
        yield match[1]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


@pytest.fixture
def browser(store_backend: Backend) -> Iterator[webdriver.Chrome]:
    _require_browser()
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1400,1000", f"--host-resolver-rules=MAP {FOREIGN} 127.0.0.1"):  # fmt: skip
        options.add_argument(flag)
    service = webdriver.ChromeService(executable_path=str(CHROMEDRIVER))
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def shots(store_backend: Backend, tmp_path: Path) -> Path:
    root = Path(os.environ["TETHER_ARTIFACTS"]) if os.environ.get("TETHER_ARTIFACTS") else tmp_path
    folder = root / "inspector" / store_backend.name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _text(driver: webdriver.Chrome, css: str) -> str:
    return str(driver.find_element(By.CSS_SELECTOR, css).text)


def _click(driver: webdriver.Chrome, element_id: str, *, then: str) -> None:
    """Click the element and wait (bounded) until the page that follows says ``then`` in its URL
    or its ``<h1>``: a form's answer may take as long as the run it drives."""
    old = driver.find_element(By.TAG_NAME, "html")
    driver.find_element(By.ID, element_id).click()

    def arrived(d: webdriver.Chrome) -> bool:
        if d.find_element(By.TAG_NAME, "html") == old:
            return False
        headings = d.find_elements(By.TAG_NAME, "h1")
        return then in d.current_url or any(then in h.text for h in headings)

    WebDriverWait(driver, 45, poll_frequency=0.05).until(arrived)


def test_the_inspector_in_chromium(inspector: str, browser: webdriver.Chrome, shots: Path) -> None:
    driver = browser
    # The access token: without it, refused; the printed address sets it for the session.
    assert httpx.get(f"{inspector}/runs").status_code == 401
    driver.get(f"{inspector}/?token={TOKEN}")
    assert driver.current_url == f"{inspector}/runs"
    rows = {r.get_attribute("data-id"): r.text for r in driver.find_elements(By.CSS_SELECTOR, "tr.run")}
    assert list(rows) == ["keep-me", "approve-me", "nested", "small-one"]
    assert "paused" in rows["approve-me"] and "waiting for manager_approval" in rows["approve-me"]
    assert "orphaned" in rows["nested"] and "completed" in rows["small-one"]
    driver.save_screenshot(str(shots / "1-runs.png"))
    _click(driver, "filter-paused", then="status=paused")
    assert [r.get_attribute("data-id") for r in driver.find_elements(By.CSS_SELECTOR, "tr.run")] == [
        "keep-me",
        "approve-me",
    ]
    driver.save_screenshot(str(shots / "2-runs-paused.png"))

    # A nested run's timeline: each row indented by its agent path's depth.
    driver.get(f"{inspector}/runs/nested")
    cells = driver.find_elements(By.CSS_SELECTOR, "tr.row td.path")
    assert [c.text for c in cells] == [
        "supervisor:ops",
        "└ tool:delegate_to_support",
        "└ worker:support",
        "└ agent:billing",
        "└ tool:refund",
    ]
    indents = [float(c.value_of_css_property("padding-left").removesuffix("px")) for c in cells]
    assert indents[0] < indents[1] == indents[2] < indents[3] < indents[4], indents
    assert [c.text for c in driver.find_elements(By.CSS_SELECTOR, "tr.row td.sync")] == [
        "synced",
        "synced",
        "quarantined: 422: item too large",
        "-",
        "-",
    ]
    assert _text(driver, "#next") == (
        "To go on, recover it: tether resume nested --runner MODULE:ATTR (or a tether worker takes it)"
    )
    driver.save_screenshot(str(shots / "3-timeline-nested.png"))

    # A diff of two chosen rows.
    driver.find_element(By.ID, "a-1").click()
    driver.find_element(By.ID, "b-4").click()
    _click(driver, "diff", then="/diff?")
    assert driver.current_url.endswith("/runs/nested/diff?a=1&b=4")
    assert _text(driver, "#summary") == "Messages: 1 shared, 2 added, 0 removed."
    added = [r.text for r in driver.find_elements(By.CSS_SELECTOR, "#messages tr.added")]
    assert added == ["+ assistant step 0", "+ assistant step 1"], added
    driver.save_screenshot(str(shots / "4-diff.png"))

    # Approve on the pending page; a second window keeps the page from before the approval.
    driver.get(f"{inspector}/pending")
    assert [r.get_attribute("data-id") for r in driver.find_elements(By.CSS_SELECTOR, "tr.pending")] == [
        "keep-me",
        "approve-me",
    ]
    driver.save_screenshot(str(shots / "5-pending.png"))
    first = driver.current_window_handle
    driver.switch_to.new_window("tab")
    driver.get(f"{inspector}/pending")
    stale = driver.current_window_handle
    driver.switch_to.window(first)
    _click(driver, "approve-approve-me", then="done=approved")
    assert driver.current_url == f"{inspector}/runs/approve-me?done=approved"
    assert _text(driver, "#status") == "completed"
    assert _text(driver, "#done") == "approved; the run is now completed."
    steps = [
        r.find_elements(By.TAG_NAME, "td")[5].text for r in driver.find_elements(By.CSS_SELECTOR, "tr.row")
    ]
    assert steps[-4:] == ["hitl_pause", "resume", "llm_call", "run_end"], steps
    assert '"refunded":true' in _text(driver, "#output")
    driver.save_screenshot(str(shots / "6-approved.png"))

    driver.switch_to.window(stale)
    _click(driver, "approve-approve-me", then="Already resumed")
    assert _text(driver, "h1") == "Already resumed"
    assert _text(driver, "#message").startswith("already resumed: ")
    driver.save_screenshot(str(shots / "7-already-resumed.png"))

    # A form without its CSRF token is refused, and the run stays paused.
    driver.get(f"{inspector}/pending")
    driver.execute_script(
        "document.querySelector('#approve-keep-me').form.querySelector('input[name=csrf]').remove()"
    )
    _click(driver, "approve-keep-me", then="Refused")
    assert _text(driver, "#message") == "refused: CSRF token missing or wrong"
    driver.save_screenshot(str(shots / "8-no-csrf.png"))
    driver.get(f"{inspector}/runs/keep-me")
    assert _text(driver, "#status") == "paused"

    # A foreign host name that resolves to 127.0.0.1 (DNS rebinding) is refused.
    port = inspector.rsplit(":", 1)[1]
    driver.get(f"http://{FOREIGN}:{port}/runs")
    body = _text(driver, "body")
    assert body.startswith(f"refused: the Host header '{FOREIGN}:{port}' is not this inspector's"), body
    driver.save_screenshot(str(shots / "9-foreign-host.png"))
    refused = httpx.get(f"{inspector}/runs", headers={"Host": f"{FOREIGN}:{port}"})
    assert refused.status_code == 400
    print(f"screenshots in {shots}", file=sys.stderr)


def _open_row(driver: webdriver.Chrome, path: str, step: str) -> webdriver.remote.webelement.WebElement:
    """Unfold the content of the timeline row at ``path`` (its tree cell) whose step is ``step``."""
    for row in driver.find_elements(By.CSS_SELECTOR, "tr.row"):
        cells = row.find_elements(By.TAG_NAME, "td")
        if cells[3].text == path and cells[5].text == step:
            folded = row.find_element(By.CSS_SELECTOR, "td.content details")
            assert folded.get_attribute("open") is None  # folded until clicked
            folded.find_element(By.TAG_NAME, "summary").click()
            assert folded.get_attribute("open") is not None
            return folded
    raise AssertionError(f"no {step} row at {path}")


def test_a_topology_run_in_chromium(topology_inspector: str, browser: webdriver.Chrome, shots: Path) -> None:
    inspector, driver = topology_inspector, browser
    final = 'final answer: billing: {"refunded":true,"order":"7","amount":5000}'
    driver.get(f"{inspector}/?token={TOKEN}")
    rows = {r.get_attribute("data-id"): r.text for r in driver.find_elements(By.CSS_SELECTOR, "tr.run")}
    assert list(rows) == ["topo-handed", "topo-done", "topo-gate"], rows
    assert "approved, waiting for a worker" in rows["topo-handed"] and "completed" in rows["topo-done"]
    driver.save_screenshot(str(shots / "topology-1-runs.png"))

    # Into the completed run: each row's content, folded until clicked.
    _click(driver, "run-topo-done", then="topo-done")
    assert [c.text for c in driver.find_elements(By.CSS_SELECTOR, "tr.row td.path")][:4] == [
        "supervisor:ops",
        "└ tool:delegate_to_support",
        "└ worker:support",
        "└ tool:lookup",
    ]
    asked = _open_row(driver, "supervisor:ops", "llm_call")
    assert asked.find_element(By.CSS_SELECTOR, ".message.role-user").text == "user: please refund order 7"
    lookup = _open_row(driver, "└ tool:lookup", "tool_call")
    assert lookup.find_element(By.CSS_SELECTOR, ".arguments").text == 'Arguments: {"order":"7"}'
    assert lookup.find_element(By.CSS_SELECTOR, ".result").text == 'Result: {"order":"7","paid":5000}'
    refund = _open_row(driver, "└ tool:refund", "tool_call")
    assert refund.find_element(By.CSS_SELECTOR, ".arguments").text == 'Arguments: {"order":"7","amount":5000}'
    assert refund.find_element(By.CSS_SELECTOR, ".result").text == (
        'Result: {"refunded":true,"order":"7","amount":5000}'
    )
    resumed = _open_row(driver, "└ tool:refund", "resume")
    assert resumed.find_element(By.CSS_SELECTOR, ".resume").text == (
        'Resume: {"approved":true,"metadata":{"approver":"ann"}}'
    )
    ended = _open_row(driver, "supervisor:ops", "run_end")
    assert ended.find_element(By.CSS_SELECTOR, ".output").text == f"Output: {final}"
    said = [m.text for m in ended.find_elements(By.CSS_SELECTOR, ".message.role-assistant")]
    assert said == [f"assistant: {final}"], said
    assert _text(driver, "#output") == final
    driver.save_screenshot(str(shots / "topology-2-run-content.png"))

    # Approved without the runner: it says what it waits for and which command finishes it.
    driver.get(f"{inspector}/runs/topo-handed")
    assert _text(driver, "#status") == "approved, waiting for a worker"
    assert _text(driver, "#next") == (
        "To go on, a worker finishes it: tether worker --runner MODULE:ATTR "
        "(or here: tether resume topo-handed --runner MODULE:ATTR)"
    )
    driver.save_screenshot(str(shots / "topology-3-approved.png"))

    # The pending gate names its agent path; approving it here drives the topology to its end.
    driver.get(f"{inspector}/pending")
    gates = driver.find_elements(By.CSS_SELECTOR, "tr.pending")
    assert [g.get_attribute("data-id") for g in gates] == ["topo-gate"]
    assert (
        gates[0].find_element(By.CSS_SELECTOR, "td.path").text == "supervisor:ops/worker:support/tool:refund"
    )
    driver.save_screenshot(str(shots / "topology-4-pending.png"))
    _click(driver, "approve-topo-gate", then="done=approved")
    assert _text(driver, "#status") == "completed" and _text(driver, "#output") == final
    driver.save_screenshot(str(shots / "topology-5-gate-approved.png"))
