"""The dashboard in a real browser (Debian's chromium driven by Playwright): sign in with the
token, watch a queue's counts change after offers made through the library, find a message
by key, pause and resume, requeue a dead letter by clicking, see the throughput chart move;
the read-only token sees no buttons that change anything."""

from __future__ import annotations

import contextlib
import os
import re
import time
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import pytest

from sqldelay import (
    DeadLetters,
    DelayedQueue,
    Message,
    RetryPolicy,
    Worker,
    create_schema,
    drop_schema,
)

from ..conftest import IN_CI, unique_name
from .server import READ_ONLY_TOKEN, TOKEN, Server

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


# the mouse's presses, releases and clicks the page received, with their targets: a click
# whose press and release land on different elements (the page moved between them) is lost
POINTER_LOG = """
window.pointerLog = [];
for (const type of ["mousedown", "mouseup", "click"]) {
  window.addEventListener(type, (event) => {
    const t = event.target;
    const name = t.tagName.toLowerCase() + (t.id ? "#" + t.id : "");
    window.pointerLog.push(`${type} at ${event.clientX},${event.clientY} on ${name} ` +
                           JSON.stringify(String(t.textContent).slice(0, 40)));
  }, true);
}
"""


@contextlib.contextmanager
def told_what_the_page_showed(page, errors):
    """An expectation that fails inside says besides where the page was, the problem it
    showed, what went wrong in it (uncaught errors and the console's errors) and where the
    mouse's clicks landed."""
    console = []
    page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
    page.evaluate(POINTER_LOG)
    try:
        yield
    except AssertionError as failed:
        problem = page.locator("#problem")
        shown = problem.text_content() if problem.is_visible() else None
        raise AssertionError(
            f"{failed}\npage at {page.url}; problem shown: {shown!r}; "
            f"errors: {[str(e) for e in errors]}; console: {console}; "
            f"pointer: {page.evaluate('window.pointerLog')}") from failed


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
    page.fill("#lookup-key", "order:2")  # the lookup opens the message's page
    page.click("#lookup button")
    expect(page.locator("#message-state")).to_have_text("scheduled")
    expect(page.locator("#message-payload")).to_contain_text('"item": "cake"')
    page.click("#crumb-queue")  # back to its queue
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
    for hidden in ("#pause", "#resume", "#requeue-selected", "#drop-selected", "#rate-form",
                   "#concurrency-form"):
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


def answered_late(pattern):
    """A script wrapping the page's fetch: each read whose address matches ``pattern`` (a
    JavaScript regular expression) is answered 2 s late; ``window.lateAnswers`` counts the
    late answers the page has taken (counted in the task that hands them over)."""
    return """
window.lateAnswers = 0;
const realFetch = window.fetch;
window.fetch = async (url, init) => {
  const response = await realFetch(url, init);
  if (!/PATTERN/.test(String(url))) return response;
  const data = await response.json();
  await new Promise((resolve) => setTimeout(resolve, 2000));
  window.lateAnswers += 1;
  return {ok: response.ok, status: response.status, statusText: response.statusText,
          json: async () => data};
};
""".replace("PATTERN", pattern)


def wait_for_late_answers(page, count):
    deadline = time.monotonic() + 30  # (the page's CSP refuses wait_for_function's eval)
    while page.evaluate("window.lateAnswers") < count:
        assert time.monotonic() < deadline, f"fewer than {count} late answers"
        page.wait_for_timeout(100)


def test_a_late_answer_never_replaces_the_list_asked_for_after_it(browser, server, engine,
                                                                   table_name):
    q = DelayedQueue(engine, unique_name("ui"), table_name=table_name)
    q.offer("a", 1)
    assert q.poll().key == "a"  # in flight
    q.offer("b", 2)  # due
    context = browser.new_context()
    context.add_init_script(answered_late("[/]messages[?]state=due&"))
    page, errors = sign_in_to(context, server, TOKEN)
    page.goto(f"{server.url}/#queue={q.name}")
    expect(page.locator("#detail")).to_be_visible()
    page.click("#browse button")  # the due messages again, answered late
    page.select_option("#browse-state", "in_flight")  # and at once the ones in flight
    page.click("#browse button")
    keys = page.locator("#messages tbody tr")
    expect(keys).to_have_attribute("data-key", "a")
    wait_for_late_answers(page, 2)
    assert [keys.nth(i).get_attribute("data-key") for i in range(keys.count())] == ["a"]
    context.close()
    assert errors == []


def test_a_queue_is_shown_whole_once_its_reads_are_in(browser, server, engine, table_name):
    q = DelayedQueue(engine, unique_name("ui"), table_name=table_name)
    q.offer("k", 1)
    DeadLetters.of(q).bury(q.poll(), "boom")
    context = browser.new_context()
    context.add_init_script(answered_late("^v1[/]throughput$"))  # the chart's read
    page, errors = sign_in_to(context, server, TOKEN)
    page.goto(f"{server.url}/#queue={q.name}")
    expect(page.locator('#dead-letters tbody tr[data-key="k"]')).to_be_visible()
    # the chart above was drawn before the dead letters were shown: it never pushes them
    # from under the pointer (a read that failed would be said here)
    assert page.evaluate("window.lateAnswers") >= 1, page.locator("#problem").text_content()
    assert page.locator("#chart-note").text_content()
    context.close()
    assert errors == []


def test_a_queue_whose_read_failed_is_shown_once_the_others_are_in(browser, server, engine,
                                                                   table_name):
    # the queue's own figures cannot be read (the database went away for that read): the
    # queue is shown with the problem said, but only once its other reads are in, the late
    # chart too, as when every read succeeds
    q = DelayedQueue(engine, unique_name("ui"), table_name=table_name)
    q.offer("k", 1)
    DeadLetters.of(q).bury(q.poll(), "boom")
    context = browser.new_context()
    context.add_init_script(answered_late("^v1[/]throughput$"))
    context.route(f"**/v1/queues/{q.name}", lambda route: route.fulfill(
        status=503, json={"error": {"code": "unavailable", "message": "database unavailable"}}))
    page, errors = sign_in_to(context, server, TOKEN)
    page.goto(f"{server.url}/#queue={q.name}")
    expect(page.locator('#dead-letters tbody tr[data-key="k"]')).to_be_visible()
    assert page.evaluate("window.lateAnswers") >= 1
    expect(page.locator("#problem")).to_have_text("database unavailable")
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


def failing_worker(q, fails, name="mailer-1"):
    """A worker of ``q`` whose handler raises for the keys in ``fails`` (a real traceback),
    retried at once and dead-lettered at the second failure."""

    def handle(envelope):
        if envelope.key in fails:
            send(envelope.payload)

    def send(payload):
        raise ConnectionError(f"SMTP server refused {payload['to']}: 554 mailbox unavailable")

    return Worker(q, handle, name=name, retry=RetryPolicy.fixed(timedelta(0), max_attempts=2),
                  idle_poll=timedelta(milliseconds=50), prune_every=None)


def test_a_message_page_with_its_timeline_from_every_list(browser, server, engine, table_name):
    q = DelayedQueue(engine, unique_name("ui"), table_name=table_name, history=True)
    q.offer("mail:1", {"to": "a@b.c"}, by="signup-service", priority=5, group="user:7")
    q.offer("mail:2", {"to": "x@y.z"}, by="signup-service")
    assert failing_worker(q, {"mail:1"}).drain() == 3  # mail:1 twice (then dead), mail:2 once
    q.offer("mail:3", {"to": "c@d.e"}, by="signup-service", group="user:8")
    held = q.poll(by="mailer-2")  # in flight
    q.offer("mail:4", {"to": "e@f.g"}, at=datetime.now(UTC) + timedelta(hours=2))

    page, errors = sign_in(browser, server, TOKEN)
    with told_what_the_page_showed(page, errors):
        page.goto(f"{server.url}/#queue={q.name}")  # a queue's view has an address of its own

        # from the dead letters: the error on one line, the traceback folded behind it
        letter = page.locator('#dead-letters tbody tr[data-key="mail:1"]')
        summary = letter.locator("td.error details summary")
        expect(summary).to_have_text("ConnectionError: SMTP server refused a@b.c: 554 mailbox "
                                     "unavailable")
        traceback = letter.locator("td.error details pre")
        expect(traceback).to_be_hidden()
        summary.click()
        expect(traceback).to_be_visible()
        expect(traceback).to_contain_text("in send")
        letter.locator("td.key a").click()
        expect(page.locator("#message-state")).to_have_text("dead lettered")
        expect(page.locator("#queues-section")).to_be_hidden()
        fields = page.locator("#message-fields")
        for name, text in (("attempts", "2"), ("priority", "5"), ("group", "user:7"),
                           ("enqueued_by", "signup-service")):
            expect(fields.locator(f'tr[data-field="{name}"] td')).to_have_text(text)
        expect(fields.locator('tr[data-field="last_error"] summary')).to_have_text(
            "ConnectionError: SMTP server refused a@b.c: 554 mailbox unavailable")
        events = page.locator("#timeline tbody tr")
        expect(events).to_have_count(5)
        assert [events.nth(i).get_attribute("data-event") for i in range(5)] == [
            "offered", "claimed", "failed", "claimed", "dead_lettered"]
        failed = events.nth(2)
        expect(failed.locator("td.actor")).to_have_text("mailer-1")
        expect(failed.locator("td.attempt")).to_have_text("1")
        expect(failed.locator("td.detail summary")).to_contain_text(
            "ConnectionError: SMTP server refused a@b.c")
        expect(failed.locator("td.detail pre")).to_be_hidden()
        expect(events.nth(0).locator("td.actor")).to_have_text("signup-service")

        # from the messages in flight: the lock's holder and expiry
        page.go_back()
        expect(page.locator("#detail")).to_be_visible()
        page.select_option("#browse-state", "in_flight")
        page.click("#browse button")
        page.locator('#messages tbody tr[data-key="mail:3"] td.key a').click()
        expect(page.locator("#message-state")).to_have_text("in flight")
        expect(fields.locator('tr[data-field="claimed_by"] td')).to_have_text("mailer-2")
        expect(fields.locator('tr[data-field="locked_until"] td')).to_have_attribute(
            "title", held.locked_until.isoformat().replace("+00:00", "Z"))
        expect(fields.locator('tr[data-field="group"] td')).to_have_text("user:8")
        expect(fields.locator('tr[data-field="trace_context"]')).to_have_count(1)
        expect(page.locator("#timeline tbody tr")).to_have_count(2)
        held.ack()  # the page follows it: gone, its timeline kept
        expect(page.locator("#message-state")).to_have_text("gone")
        expect(page.locator("#message-absent")).to_contain_text("acked or dropped")
        expect(page.locator("#timeline tbody tr").last).to_have_attribute("data-event", "acked")

        # the message lists show priority and group
        page.click("#crumb-queue")
        page.select_option("#browse-state", "scheduled")
        page.click("#browse button")
        scheduled = page.locator('#messages tbody tr[data-key="mail:4"]')
        expect(scheduled.locator("td.priority")).to_have_text("0")
        # from the lookup, a message acked long ago: its page with its timeline
        page.fill("#lookup-key", "mail:2")
        page.click("#lookup button")
        expect(page.locator("#message-state")).to_have_text("gone")
        expect(page.locator("#timeline tbody tr").last).to_have_attribute("data-event", "acked")
        assert errors == []


def test_pause_marker_and_limit_controls(browser, server, engine, table_name):
    q = DelayedQueue(engine, unique_name("ui"), table_name=table_name)
    q.offer("k", 1)
    page, errors = sign_in(browser, server, TOKEN)
    show_queues(page, q.name)
    expect(row(page, q.name).locator(".paused")).to_have_count(0)
    row(page, q.name).locator("a").click()
    page.click("#pause")
    expect(row(page, q.name).locator(".paused")).to_be_visible()
    assert q.flow_control().paused

    page.fill("#rate-limit", "120")
    page.fill("#rate-per", "60")
    page.click("#rate-form button[type=submit]")
    expect(page.locator("#detail-limits")).to_contain_text("rate limit: 120 claims per 60 s")
    page.fill("#concurrency-limit", "4")
    page.click("#concurrency-form button[type=submit]")
    expect(row(page, q.name).locator("td.limits")).to_have_text("120 / 60 s · ≤ 4 in flight")
    control = q.flow_control()
    assert (control.rate_limit, control.rate_period, control.concurrency_limit) == (
        120, timedelta(seconds=60), 4)

    page.fill("#concurrency-limit", "0")  # refused by the browser's form: nothing sent
    page.click("#concurrency-form button[type=submit]")
    assert q.flow_control().concurrency_limit == 4
    page.click("#rate-lift")
    expect(row(page, q.name).locator("td.limits")).to_have_text("≤ 4 in flight")
    page.click("#concurrency-lift")
    expect(row(page, q.name).locator("td.limits")).to_have_text("")
    page.click("#resume")
    expect(row(page, q.name).locator(".paused")).to_have_count(0)
    control = q.flow_control()
    assert (control.paused, control.rate_limit, control.concurrency_limit) == (
        False, None, None)
    assert errors == []


def test_times_are_in_the_browsers_zone_and_say_which(browser, server, engine, table_name):
    q = DelayedQueue(engine, unique_name("ui"), table_name=table_name)
    q.offer("k", 1, at=datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC))
    context = browser.new_context(locale="en-US", timezone_id="Asia/Kolkata")
    page, errors = sign_in_to(context, server, TOKEN)
    page.goto(f"{server.url}/#queue={q.name}&key=k")
    due = page.locator('#message-fields tr[data-field="due_at"] td')
    expect(due).to_have_text(re.compile(r"May 6, 2031.*12:38:09\s*PM GMT\+5:30"))
    expect(due).to_have_attribute("title", "2031-05-06T07:08:09Z")
    context.close()
    assert errors == []


def minutes_before(now: float):
    """The start of the minute ``ago`` minutes before the one of ``now``, in epoch ms: one
    reading of the clock for a whole test, which may cross into the next minute."""
    return lambda ago: (int(now) // 60 - ago) * 60_000


def test_the_chart_draws_whole_minutes_and_nothing_from_one(browser, server, engine,
                                                               table_name):
    """Fed samples (the page's read of the throughput answered by the test): a single whole
    minute draws nothing, three whole minutes draw a line through three points; the minute
    being counted is never drawn, only told."""
    q = DelayedQueue(engine, unique_name("ui"), table_name=table_name)
    q.offer("k", 1)
    minute_ms = minutes_before(time.time())
    samples = {"every_seconds": 10, "problem": None, "since": minute_ms(1),
               "minute": minute_ms(0), "queues": {f"{q.name}|json": [
                   [minute_ms(1), 30, 20], [minute_ms(0), 5, 4]]}}
    context = browser.new_context()
    context.route("**/v1/throughput", lambda route: route.fulfill(json=samples))
    page, errors = sign_in_to(context, server, TOKEN)
    page.goto(f"{server.url}/#queue={q.name}")
    chart = page.locator("#chart")
    expect(chart).to_have_attribute("data-minutes", "1")
    expect(chart.locator("svg")).to_have_count(0)
    expect(page.locator("#chart-note")).to_contain_text("from the second one on")
    expect(page.locator("#chart-note")).to_contain_text("This minute so far: 5 offered, 4 acked")

    samples["since"] = minute_ms(3)
    samples["queues"][f"{q.name}|json"] = [[minute_ms(3), 10, 0], [minute_ms(1), 30, 20],
                                           [minute_ms(0), 5, 4]]
    expect(chart).to_have_attribute("data-minutes", "3")
    offered = chart.locator("path.offered")
    expect(offered).to_have_count(1)
    assert offered.get_attribute("d").count("L") == 2  # three points; minute 2 counted 0
    context.close()
    assert errors == []


# where the screenshots of the docs go: docs/ with SQLDELAY_DOCS_SCREENSHOTS=docs (see
# docs/web.md), else the test's own directory
DOCS_SCREENSHOTS = os.environ.get("SQLDELAY_DOCS_SCREENSHOTS")


def test_the_docs_screenshots(browser, backend_url, engine, tmp_path):
    """The screenshots of docs/web.md and the README, of a table of its own: producers, a
    worker whose webhook handler fails now and then, a paused queue with limits, and five
    minutes of traffic (the sampler's clock is moved a minute at a time while the traffic of
    each runs, so that the chart has whole minutes to draw within seconds)."""
    out = Path(DOCS_SCREENSHOTS) if DOCS_SCREENSHOTS else tmp_path
    table = unique_name("shots")
    create_schema(engine, table_name=table, history=True)
    start = (int(time.time()) // 60 - 6) * 60 + 20  # six minutes ago, 20 s into its minute
    clock = [start]
    server = Server(backend_url, table, history=True, sample_every=timedelta(seconds=0.5),
                    sampler_clock=lambda: clock[0]).start()
    try:
        make = partial(DelayedQueue, engine, table_name=table, history=True)
        emails, webhooks, reports = make("emails"), make("webhooks"), make("reports")
        mailer = Worker(emails, lambda env: None, name="mailer-1", prune_every=None)
        hooks = Worker(webhooks, deliver_webhook, name="hooks-1", prune_every=None,
                       retry=RetryPolicy.fixed(timedelta(0), max_attempts=3))
        sampler = server.app.state.sampler

        async def counted():
            return sampler.snapshot()

        deadline = time.monotonic() + 30
        while server.call(counted())["since"] is None:  # the first sample, six minutes ago
            assert time.monotonic() < deadline, "the sampler did not start"
            time.sleep(0.05)
        for minute, (mails, events) in enumerate([(40, 25), (65, 30), (80, 42), (72, 38),
                                                  (90, 45)], start=1):
            clock[0] = start + minute * 60
            now = datetime.now(UTC)
            emails.offer_many([Message(f"welcome:{minute}-{i}", {"to": f"user{i}@example.com"})
                               for i in range(mails)], by="signup-service")
            webhooks.offer_many([Message(f"hook:{minute}{i:02}", {
                "event": f"order.paid:{minute}{i:02}", "url": WEBHOOK_URL},
                at=now, priority=i % 3, group=f"shop:{i % 5}") for i in range(events)],
                by="orders-api")
            mailer.drain()
            hooks.drain()
            # one more offer after the workers' last write: once the sampler has counted it,
            # it has read past every event of the minute (it may miss one that committed
            # after a later one was counted, as the service's counts may: PostgreSQL and
            # MariaDB hand out the history's ids before the workers' transactions commit)
            emails.offer(f"welcome:{minute}-last", {"to": "last@example.com"},
                         by="signup-service")
            deadline = time.monotonic() + 30
            while True:
                counts = server.call(counted())["queues"].get("emails|json", [])
                if [m for m in counts if m[:2] == [clock[0] // 60 * 60_000, mails + 1]]:
                    break
                assert time.monotonic() < deadline, "the sampler did not count the minute"
                time.sleep(0.05)
        clock[0] = start + 6 * 60 + 15  # the current minute, counted so far
        emails.offer_many([Message(f"welcome:late-{i}", {"to": f"user{i}@example.com"},
                                   at=datetime.now(UTC) - timedelta(seconds=40 - i))
                           for i in range(12)], by="signup-service")
        webhooks.offer_many([Message(f"hook:7{i:02}", {"event": f"order.paid:7{i:02}",
                                                       "url": WEBHOOK_URL}, priority=1,
                                     group=f"shop:{i}") for i in range(6)], by="orders-api")
        held = webhooks.poll_many(2, by="hooks-2")  # in flight
        reports.offer_many([Message(f"report:{day}", {"day": day},
                                    at=datetime.now(UTC) + timedelta(hours=day))
                            for day in range(1, 9)], by="billing")
        reports.pause()
        reports.set_rate_limit(10, per=timedelta(minutes=1))
        webhooks.set_concurrency_limit(8)
        dead = DeadLetters.of(webhooks).list("webhooks")[-1]

        context = browser.new_context(viewport={"width": 1100, "height": 900},
                                      locale="en-GB", timezone_id="Europe/Bucharest")
        page, errors = sign_in_to(context, server, TOKEN)
        page.goto(f"{server.url}/#queue=webhooks")
        expect(page.locator("#chart svg path.offered")).to_have_count(1)
        expect(page.locator("#chart")).to_have_attribute("data-minutes", "5")
        expect(row(page, "reports").locator(".paused")).to_be_visible()
        expect(row(page, "reports").locator("td.limits")).to_have_text("10 / 60 s")
        expect(page.locator("#dead-letters tbody tr")).to_have_count(
            DeadLetters.of(webhooks).count("webhooks"))
        page.select_option("#browse-state", "in_flight")
        page.click("#browse button")
        expect(page.locator("#messages tbody tr")).to_have_count(len(held))
        page.locator("#lookup-key").fill(dead.key)
        page.screenshot(path=out / "dashboard.png", full_page=True)

        page.click("#lookup button")
        expect(page.locator("#message-state")).to_have_text("dead lettered")
        expect(page.locator("#timeline tbody tr")).to_have_count(7)
        failure = page.locator("#timeline tbody tr").nth(2)
        failure.locator("summary").click()
        expect(failure.locator("pre")).to_contain_text("in deliver_webhook")
        with page.expect_response(lambda r: r.url.endswith("/history")):
            pass  # the page's next refresh, which leaves the traceback unfolded
        expect(failure.locator("pre")).to_be_visible()
        page.screenshot(path=out / "dashboard-message.png", full_page=True)
        context.close()
        assert errors == []
    finally:
        server.stop()
        drop_schema(engine, table_name=table)


WEBHOOK_URL = "https://shop.example.com/hooks/orders"


def deliver_webhook(envelope):
    """The webhooks' handler: the endpoint of events 13 and 37 of each minute answers 502."""
    if envelope.key[-2:] in ("13", "37"):
        post(envelope.payload["url"], envelope.payload)


def post(url, body):
    raise ConnectionError(f"POST {url}: 502 Bad Gateway (event {body['event']})")
