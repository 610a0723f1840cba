"""Tools that misbehave do not take the run with them (issue #59, item 4): ``SystemExit`` and ``KeyboardInterrupt``
are the call's error, a hung call is abandoned after ``agent.tool_timeout``, a stop cancels the queued turns without
waiting for running ones, nothing a tool does holds the process's exit, and what would train at reward 0 is said
once. No sleeps: tools block on events the tests hold."""

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from infgrpo.agent.calls import ToolWorkers, stop_tool_calls
from infgrpo.agent.tool_watch import ToolWatch, tool_warnings
from infgrpo.agent.tools import tool_box, tool_schema
from infgrpo.settings import InfgrpoWarning
from tests.agent import toolbox

ROOT = Path(__file__).resolve().parents[2]
TOOLS = [
    toolbox.add, toolbox.mul, toolbox.quit_run, toolbox.interrupt, toolbox.quit_async, toolbox.nothing,
    toolbox.broken, toolbox.hang, toolbox.hang_async,
]  # fmt: skip


def call(name, **arguments):
    """A parsed tool call."""
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def box():
    """Every tool of this file, by name."""
    return tool_box(TOOLS, [tool_schema(t, t.__name__) for t in TOOLS])


@pytest.fixture
def workers():
    """Two tool threads and the event loop, ended after the test."""
    workers = ToolWorkers(2)
    yield workers
    workers.close()


def test_system_exit_and_keyboard_interrupt_are_the_calls_error_and_warned_once(workers):
    calls = [call("quit_run", code=3), call("interrupt", x=1), call("quit_async", code=4), call("add", a=1, b=2)]
    result = workers.submit(workers.run, calls, box()).result()  # in TRL: exit code 3, then Ctrl-C
    assert [(m["name"], m["content"]) for m in result.messages] == [
        ("quit_run", "{'error': 'SystemExit(3)'}"),
        ("interrupt", "{'error': 'KeyboardInterrupt()'}"),
        ("add", "3"),
        ("quit_async", "{'error': 'SystemExit(4)'}"),  # raised inside the event loop's task: the loop lives on
    ]
    assert (result.calls, result.failures, result.timeouts) == (4, 3, 0)
    assert workers.submit(workers.run, [call("mul", a=6, b=7)], box()).result().messages[0]["content"] == "42"
    tally, watch = workers.take_tally(), ToolWatch(timeout=None)
    with pytest.warns(InfgrpoWarning) as seen:
        watch(tally, 0, 64)
    lines = {str(w.message).split("'")[1]: str(w.message) for w in seen}  # by tool
    assert sorted(lines) == ["interrupt", "quit_async", "quit_run"]
    assert all("raised SystemExit or KeyboardInterrupt in 1 of its 1 calls" in x for x in lines.values())
    assert "(the model read {'error': 'SystemExit(3)'}): caught, each such call's result is" in lines["quit_run"]
    assert "os._exit() or a crash in native code still ends the process" in lines["interrupt"]
    assert watch(tally, 0, 64) == []  # once


def test_a_hung_call_is_abandoned_after_the_timeout_and_the_sample_goes_on():
    toolbox.HELD.clear()
    workers = ToolWorkers(1, timeout=0.05)
    calls = [call("hang", x=1), call("add", a=1, b=2), call("hang_async", x=2)]
    result = workers.submit(workers.run, calls, box()).result()  # TRL: waits forever
    assert [m["content"] for m in result.messages] == [
        "{'error': 'hang timed out after 0.05 s'}", "3", "{'error': 'hang_async timed out after 0.05 s'}",
    ]  # fmt: skip
    assert (result.calls, result.failures, result.timeouts) == (3, 2, 2)
    abandoned = [t for t in threading.enumerate() if t.name == "infgrpo-tool-hang"]
    assert abandoned and all(t.daemon for t in abandoned)  # still blocked, and nothing will wait for it
    assert workers.submit(workers.run, [call("mul", a=2, b=5)], box()).result().messages[0]["content"] == "10"
    toolbox.HELD.set()
    for thread in abandoned:
        thread.join()
    messages = tool_warnings(workers.take_tally(), 0, 64, 0.05)
    assert set(messages) == {("timeout", "hang"), ("timeout", "hang_async")}
    assert messages[("timeout", "hang")].startswith(
        "1 of tool 'hang''s 1 calls did not return within model.agent.tool_timeout=0.05 s: each became the call's "
        "error and its sample went on"
    )
    workers.close()


def test_a_stop_cancels_the_queued_turns_and_does_not_wait_for_the_running_one():
    workers, started, release, ran = ToolWorkers(1), threading.Event(), threading.Event(), []

    def running():
        started.set()
        release.wait()
        ran.append("running")
        return "done"

    first = workers.submit(running)
    queued = [workers.submit(ran.append, i) for i in range(3)]
    started.wait()  # the one worker is in `running`; the others wait in the queue
    cancelled = []
    stopper = threading.Thread(target=lambda: cancelled.append(stop_tool_calls()))  # the second Ctrl-C's call
    stopper.start()
    stopper.join(60)
    assert not stopper.is_alive() and cancelled == [3]  # returned while `running` still blocks
    assert all(f.cancelled() for f in queued) and not first.done()
    assert workers.submit(ran.append, 9).cancelled()  # nothing starts after a stop
    release.set()
    assert first.result() == "done" and ran == ["running"]  # the queued turns never ran
    workers.close()


def test_what_trains_at_reward_0_is_said_once_with_counts():
    workers = ToolWorkers(1)
    calls = [call("broken", x=1), call("broken", x=2), call("nothing", x=3), call("add", a=1, b=1)]
    workers.submit(workers.run, calls, box()).result()
    tally = workers.take_tally()
    assert tally.calls == {"broken": 2, "nothing": 1, "add": 1} and tally.count("failed", "broken") == 2
    workers.close()
    messages = tool_warnings(tally, 3, 64, 60.0)
    assert set(messages) == {("failed", "broken"), ("none", "nothing"), ("dropped",)}
    assert messages[("failed", "broken")].startswith(
        "every call of tool 'broken' failed in this rollout (2 of 2; the first error the model read: "
        "{'error': 'broken on 1'}): a completion that needs the tool scores as one without it (often reward 0)"
    )
    assert messages[("none", "nothing")].startswith(
        "tool 'nothing' returned None for 1 of its 1 calls in this rollout: the model reads the text 'None'"
    )
    assert messages[("dropped",)].startswith(
        "3 tool results were dropped in this rollout as too long: the completion with the result would pass "
        "model.sampler.max_new_tokens=64 or the model's context"
    )
    watch = ToolWatch(60.0)
    with pytest.warns(InfgrpoWarning, match=r"^\[infgrpo\] "):
        assert len(watch(tally, 3, 64)) == 3
    assert watch(tally, 3, 64) == []


EXIT = """
import sys
from tests.agent import toolbox
from tests.agent.test_misbehaving_tools import box, call
from infgrpo.agent.calls import ToolWorkers

timed = ToolWorkers(1, timeout=0.05)
print(timed.submit(timed.run, [call("hang", x=1)], box()).result().messages[0]["content"], flush=True)
toolbox.ENTERED.clear()
stuck = ToolWorkers(1)  # no timeout: its worker stays in the call
stuck.submit(stuck.run, [call("hang", x=2)], box())
stuck.submit(stuck.run, [call("hang", x=3)], box())  # queued behind it
toolbox.ENTERED.wait()  # the worker is in the hung call (a ThreadPoolExecutor's would hold the exit forever)
sys.exit(0)
"""


@pytest.mark.slow  # a process of its own
def test_a_hung_tool_does_not_hold_the_processs_exit():
    proc = subprocess.run([sys.executable, "-c", EXIT], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == "{'error': 'hang timed out after 0.05 s'}\n"
