"""Listeners: every method a listener overrides is called, whichever way it overrides it; the
base classes' no-ops are passed over."""

from __future__ import annotations

from sqldelay.listeners import Listeners, QueueListener, WorkerListener


def test_overridden_methods_are_called_and_the_base_no_ops_passed_over():
    heard: list[tuple] = []

    class Started(WorkerListener):
        def started(self, envelope):
            heard.append(("class", envelope))

    on_instance = WorkerListener()
    on_instance.succeeded = lambda envelope, elapsed: heard.append(("instance", envelope))

    class Offered(QueueListener):
        def offered(self, queue, outcomes):
            heard.append(("offered", queue))

    listeners = Listeners([WorkerListener(), Started(), on_instance, Offered()])
    listeners.emit("started", "e1")
    listeners.emit("succeeded", "e2", None)
    listeners.emit("offered", "q", [])
    listeners.emit("idle")
    assert heard == [("class", "e1"), ("instance", "e2"), ("offered", "q")]


def test_a_listener_that_raises_does_not_stop_the_others():
    heard: list[str] = []

    class Broken(WorkerListener):
        def idle(self):
            raise RuntimeError("broken")

    class Fine(WorkerListener):
        def idle(self):
            heard.append("idle")

    Listeners([Broken(), Fine()]).emit("idle")
    assert heard == ["idle"]
