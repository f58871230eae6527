"""The dashboard in a real browser (Debian's chromium driven by Playwright): sign in with the
token, watch a queue's counts change after offers made through the library, find a message
by key, pause and resume, requeue a dead letter by clicking, see the throughput chart move;
the read-only token sees no buttons that change anything."""

from __future__ import annotations

import os
import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from sqldelay import DeadLetters, DelayedQueue

from ..conftest import IN_CI, unique_name
from .server import READ_ONLY_TOKEN, TOKEN

CHROMIUM = Path(os.environ.get("SQLDELAY_TEST_CHROMIUM", "/usr/bin/chromium"))
playwright = pytest.importorskip("playwright.sync_api")
expect = playwright.expect
expect.set_options(timeout=15_000)  # the page refreshes every 2 s; a busy machine is slower


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        message = f"no chromium at {CHROMIUM} (apt-get install chromium)"
        if IN_CI:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    with playwright.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=str(CHROMIUM))
        yield launched
        launched.close()


def sign_in(browser, server, token):
    return sign_in_to(browser.new_context(viewport={"width": 1200, "height": 1000}), server,
                      token)


def sign_in_to(context, server, token):
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(error))
    page.goto(server.url + "/")
    page.fill("#token", token)
    page.click("button[type=submit]")
    expect(page.locator("#role")).to_be_visible()
    return page, errors


def row(page, queue):
    return page.locator(f'#queues tbody tr[data-queue="{queue}"]')


def show_queues(page, prefix):
    """The queue list filtered by name prefix (the test table holds many queues)."""
    page.fill("#queues-prefix", prefix)
    page.click("#queues-filter button")


def test_operator_watches_finds_pauses_and_requeues(browser, server, engine, table_name):
    q = DelayedQueue(engine, unique_name("ui"), table_name=table_name, history=True)
    page = browser.new_page()
    page.goto(server.url + "/")
    page.fill("#token", "not-the-token-at-all")
    page.click("button[type=submit]")
    expect(page.locator(".problem")).to_have_text("That token is not valid.")
    page.close()

    page, errors = sign_in(browser, server, TOKEN)
    expect(page.locator("#role")).to_have_text("admin")
    show_queues(page, q.name)
    q.offer("order:1", {"item": "tea"})
    expect(row(page, q.name).locator("td.due")).to_have_text("1")
    q.offer("order:2", {"item": "cake"}, at=datetime.now(UTC) + timedelta(hours=1))
    q.offer("order:3", {"item": "jam"})
    expect(row(page, q.name).locator("td.due")).to_have_text("2")
    expect(row(page, q.name).locator("td.scheduled")).to_have_text("1")

    row(page, q.name).locator("a").click()
    page.fill("#lookup-key", "order:2")
    page.click("#lookup button")
    expect(page.locator("#lookup-result")).to_contain_text("state: scheduled")
    expect(page.locator("#lookup-result")).to_contain_text('"item":"cake"')
    page.fill("#lookup-key", "order:404")
    page.click("#lookup button")
    expect(page.locator("#lookup-result")).to_have_text("no message order:404")

    page.click("#pause")
    expect(page.locator("#detail-paused")).to_be_visible()
    assert q.flow_control().paused
    page.click("#resume")
    expect(page.locator("#detail-paused")).to_be_hidden()
    assert not q.flow_control().paused

    q.offer("broken", {"item": "?"}, at=datetime.now(UTC) - timedelta(hours=1))
    envelope = q.poll()
    assert envelope.key == "broken"
    DeadLetters.of(q).bury(envelope, "ValueError: no such item")
    q.poll().ack()  # order:1, acked: the chart's acked line moves
    row(page, q.name).locator("a").click()  # opens the queue again, with its dead letters
    letter = page.locator('#dead-letters tbody tr[data-key="broken"]')
    expect(letter.locator("td.error")).to_have_text("ValueError: no such item")
    letter.get_by_role("button", name="Requeue").click()
    expect(letter).to_have_count(0)
    assert q.get("broken").payload == {"item": "?"}

    for key in ("order:1", "order:3"):  # two dead letters more, dropped together
        q.offer(key, {"item": key}, at=datetime.now(UTC) - timedelta(hours=2))
        DeadLetters.of(q).bury(q.poll(), "gone")
    row(page, q.name).locator("a").click()
    expect(page.locator("#dead-letters tbody tr")).to_have_count(2)
    page.on("dialog", lambda dialog: dialog.accept())  # "Drop 2 dead letter(s) for good?"
    page.check("#select-all")
    page.click("#drop-selected")
    expect(page.locator("#dead-letters tbody tr")).to_have_count(0)
    assert DeadLetters.of(q).count(q.name) == 0

    chart = page.locator("#chart")
    expect(chart).to_have_attribute("data-offered", re.compile(r"^[4-9]|\d\d"))
    expect(chart).to_have_attribute("data-acked", re.compile(r"^[1-9]"))
    assert errors == []


def test_the_read_only_token_sees_no_changing_buttons(browser, server, engine, table_name):
    q = DelayedQueue(engine, unique_name("ui"), table_name=table_name)
    q.offer("k", 1)
    DeadLetters.of(q).bury(q.poll(), "boom")
    page, errors = sign_in(browser, server, READ_ONLY_TOKEN)
    expect(page.locator("#role")).to_have_text("read-only")
    show_queues(page, q.name)
    row(page, q.name).locator("a").click()
    expect(page.locator('#dead-letters tbody tr[data-key="k"]')).to_have_count(1)
    for hidden in ("#pause", "#resume", "#requeue-selected", "#drop-selected"):
        expect(page.locator(hidden)).to_be_hidden()
    expect(page.get_by_role("button", name="Requeue")).to_have_count(0)
    [session] = [c for c in page.context.cookies() if c["name"] == "sqldelay_session"]
    page.get_by_role("button", name="Sign out").click()
    expect(page.locator("#token")).to_be_visible()  # the login form
    assert page.context.cookies() == []
    # the session is closed on the server: a copy of the cookie kept elsewhere is no use
    other = browser.new_context()
    other.add_cookies([session])
    assert other.request.get(server.url + "/v1/queues").status == 401
    other.close()
    assert errors == []


# wraps the page's fetch: each read of the queue list is answered 3 s late (a slow server,
# slower than the 2 s refresh), and the reads at once are counted
SLOW_LIST = """
window.listReads = {now: 0, most: 0, done: 0};
const realFetch = window.fetch;
window.fetch = async (url, init) => {
  if (!String(url).startsWith("v1/queues?")) return realFetch(url, init);
  const reads = window.listReads;
  reads.now += 1;
  reads.most = Math.max(reads.most, reads.now);
  try {
    const response = await realFetch(url, init);
    await new Promise((resolve) => setTimeout(resolve, 3000));
    return response;
  } finally {
    reads.now -= 1;
    reads.done += 1;
  }
};
"""


def test_a_slow_queue_list_is_never_read_twice_at_once(browser, server, engine, table_name):
    q = DelayedQueue(engine, unique_name("ui"), table_name=table_name)
    q.offer("k", 1)
    context = browser.new_context()
    context.add_init_script(SLOW_LIST)
    page, errors = sign_in_to(context, server, TOKEN)
    show_queues(page, q.name)  # a read asked for while the first one runs
    row(page, q.name).locator("a").click()  # and another
    deadline = time.monotonic() + 60  # three reads of 3 s, 2 s apart (the page's CSP
    while page.evaluate("window.listReads.done") < 3:  # refuses wait_for_function's eval)
        assert time.monotonic() < deadline, "the list was not read three times"
        page.wait_for_timeout(100)
    assert page.evaluate("window.listReads.most") == 1
    context.close()
    assert errors == []


def test_the_queue_list_pages(browser, server, engine, table_name):
    base = unique_name("uipage")
    names = [f"{base}_{i:02}" for i in range(52)]
    for name in names:
        DelayedQueue(engine, name, table_name=table_name).offer("k", 1)
    page, errors = sign_in(browser, server, TOKEN)
    show_queues(page, base)
    rows = page.locator("#queues tbody tr")
    expect(rows).to_have_count(50)
    expect(rows.first).to_have_attribute("data-queue", names[0])
    expect(page.locator("#queues-prev")).to_be_hidden()
    page.click("#queues-next")
    expect(rows).to_have_count(2)
    expect(rows.first).to_have_attribute("data-queue", names[50])
    expect(page.locator("#queues-next")).to_be_hidden()
    page.click("#queues-prev")
    expect(rows).to_have_count(50)
    expect(rows.last).to_have_attribute("data-queue", names[49])
    assert errors == []
