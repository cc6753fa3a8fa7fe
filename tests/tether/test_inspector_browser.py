"""The inspector end to end in a real headless Chromium (Debian's ``chromium`` and ``chromedriver``).

``tether inspect`` runs as the console script on a store the test wrote (a paused refund of the
demo's runner, a nested run's rows, a completed refund); the browser opens its printed address
(with the access token), reads the runs list and its filters, a nested run's timeline (each row
indented by its agent path's depth, with its replication state), a diff of two rows it picks, approves the pending run and sees
it reach its ``run_end``, then presses Approve again on a stale page and reads "already resumed".
A form posted without its CSRF token and a page asked for under a foreign host name are refused.
A screenshot of every page goes to ``$TETHER_ARTIFACTS/inspector/`` (default: the test's tmp
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

from actors import ActorSystem
from tether._demo import demo_agent

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


@pytest.fixture
def inspector(store_backend: Backend, tmp_path: Path) -> Iterator[str]:
    """``tether inspect`` on the test's store; its base address (``http://127.0.0.1:PORT``)."""
    _require_browser()
    anyio.run(_write, store_backend)
    proc = subprocess.Popen(
        [str(TETHER), "inspect", "--port", "0", "--token", TOKEN, "--runner", RUNNER],
        env={**os.environ, "TETHER_STORE": url_of(store_backend)},
        cwd=tmp_path,
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
