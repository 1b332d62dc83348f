"""Target faults turned into findings: a crash or a hang is a fail with evidence.

These are not catalogue requirements but the suite's own liveness rules
(family ``TARGET``): the harness records ``timeout`` and ``early-exit`` events
in the transcript, and these checkers grade them like any other traffic.
"""

from __future__ import annotations

from conformance.checks.base import Checker, Rule, register
from conformance.checks.timeline import ConnEnd, Frame
from conformance.results import Outcome


@register
class Liveness(Checker):
    rules = (
        Rule("TARGET/exit", "the target stays up until the suite closes it", Outcome.FAIL,
             untested="no target process in the transcript"),
        Rule("TARGET/hang", "the target answers every wait within --timeout", Outcome.FAIL,
             untested="no target process in the transcript"),
    )

    def on_frame(self, ev: Frame) -> None:
        e = ev.entry
        if e.stream != "harness":
            return
        data = e.data if isinstance(e.data, dict) else {}
        if e.event == "timeout":
            self.found("TARGET/hang", f"no answer within {data.get('timeout')} s while waiting "
                       f"for {data.get('waiting_for')}", entries=[e.seq],
                       expected=data.get("waiting_for"),
                       actual={"silence": True, "stderr_tail": data.get("stderr_tail", "")})
        elif e.event == "early-exit":
            self.found("TARGET/exit",
                       f"the target closed its output (exit code {data.get('returncode')}, "
                       f"signal {data.get('signal')}) while the suite waited for "
                       f"{data.get('waiting_for')}", entries=[e.seq],
                       expected="the process running",
                       actual={"returncode": data.get("returncode"), "signal": data.get("signal"),
                               "stderr_tail": data.get("stderr_tail", "")})

    def on_conn_end(self, ev: ConnEnd) -> None:
        self.exercised("TARGET/exit")
        self.exercised("TARGET/hang")
