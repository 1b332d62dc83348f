"""The suite's own reports: case results gathered (from xdist workers too) and written.

A proxy run with ``--acp-agent`` also gathers the real agent's own results: they are
rendered apart (their own terminal section, ``NAME.agent.json`` beside ``--acp-json``),
as the command line's ``report_behind`` (cli/output.py) does; the session's verdict is the proxy's.

SIGINT or SIGTERM during the session cuts the case in progress (its target ends) and grades
what it recorded, through the run engine as the command line does, then stops the session;
every report then says ``interrupted`` (the signal's name) with the verdict ``interrupted``,
keeps the cases graded and lists the rest as not run, and the session exits 128+N as the command line does (not pytest's own
2: one exit status for an interrupted run in every shell, which the Action reads too).
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from conformance.pytest_plugin import workers
from conformance.pytest_plugin.state import STATE


def showable(excinfo: Any) -> None:
    """An interrupt the plugin raised (a signal), made one pytest can show: pytest's
    terminal reporter prints where it landed, and a frame Python gives no line number
    (the signal came between two lines' code) breaks that report (a TypeError, a traceback
    and exit 1 instead of the session's 128+N). Those frames are left out, and so is the
    exception the signal cut short (its context: nothing the user did)."""
    from _pytest._code.code import Traceback

    kept = [e for e in excinfo.traceback if e._rawentry.tb_lineno is not None]
    if len(kept) < len(excinfo.traceback):
        excinfo.traceback = Traceback(kept)
    excinfo.value.__suppress_context__ = True


class Reports:
    """Gathers case results (from xdist workers too) and writes the suite's reports."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.cases: dict[int, dict[str, Any]] = {}
        self.agents: dict[int, dict[str, Any]] = {}  # the real agent's, behind a proxy
        self.signum = 0  # the signal that interrupted the session (0: none did)
        self.session: pytest.Session | None = None
        self._old: dict[int, Any] = {}
        from conformance.lifecycle import QuietDrops

        self._quiet = QuietDrops(KeyboardInterrupt)
        self.worker = hasattr(config, "workerinput")  # an xdist worker (-n N)
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._interrupt)
            if self.worker:  # the controller passes a signal on to its workers
                workers.register(config)

    def _interrupt(self, signum: int, frame: Any) -> None:
        """The first signal ends the session. While an item plays its case, the engine's
        signals cut the case (its target is stopped), it is graded on what was recorded, as
        the command line grades it, and the session stops after that item; otherwise it
        ends as Ctrl-C does (KeyboardInterrupt). Later signals are noted only, so the
        reports are not torn."""
        if self.signum:
            return
        self.signum = signum
        if workers.relay(self.config, signum):  # xdist's controller: its workers play the cases
            return  # and it waits for their reports
        if self.session is not None:  # pytest stops after the item in progress, should
            # the raise below be dropped (in a gc callback) or the engine cut the case
            self.session.shouldstop = f"interrupted by {signal.Signals(signum).name}"
        state = self.config.stash.get(STATE, None)
        if state is None or not (state.playing or self.worker):
            raise KeyboardInterrupt
        state.interrupt(signum, frame)  # KeyboardInterrupt while it drives the target

    @pytest.hookimpl(tryfirst=True)
    def pytest_keyboard_interrupt(self, excinfo: Any) -> None:
        if self.signum:
            showable(excinfo)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """xdist's controller: each worker says where it runs, for :meth:`_interrupt`."""
        workers.configure_node(self.config, node)

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.session = session
        if self._old:  # a stop whose raise Python drops (in a gc callback) stops the
            # session all the same (shouldstop): no warning with a traceback for it
            self._quiet.start()

    def pytest_unconfigure(self) -> None:
        self._quiet.stop()
        for sig, old in self._old.items():
            signal.signal(sig, old)
        workers.unregister(self.config)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = getattr(report, "acp_case", None)
        if isinstance(data, dict) and report.when == "call":
            self.cases[int(data["order"])] = data
            if isinstance(data.get("agent"), dict):
                self.agents[int(data["order"])] = data["agent"]

    def result(self, behind: bool = False) -> Any:
        """The run's result as the command line concludes it; ``behind``: the result of the
        real agent behind the proxy, in the proxy's plan order (``run_proxy_suite``)."""
        from conformance import __version__
        from conformance.report.catalogue import run_date
        from conformance.report.jsonreport import case_from_json
        from conformance.results import RunResult

        state = self.config.stash[STATE]
        label, role, gathered = state.label, state.role, self.cases
        if behind:
            label, role, gathered = " ".join(state.run.agent), "agent", self.agents
        result = RunResult(__version__, label, role, list(state.run.protocols),
                           state.run.options.profile.name, state.run.strict, date=run_date(),
                           repeat=self.config.getoption("acp_repeat"))
        for order in sorted(gathered):
            data = gathered[order]
            cr = case_from_json(data["case"], data["results"])
            cr.target_info = dict(data.get("target_info") or {})
            result.cases.append(cr)
            if not result.target_info and cr.target_info.get("name"):
                result.target_info = dict(cr.target_info)
        if self.signum:
            self.mark_interrupted(result)
        from conformance.grading import conclude

        conclude(result, self.config.getoption("acp_deadline"))  # as the engine concludes
        if behind:
            result.cut = self.result().cut  # the proxy's run was cut, or not
        return result

    def mark_interrupted(self, result: Any) -> None:
        """As the engine's ``mark_interrupted``: the run says which signal stopped it, keeps
        what was graded and lists every case of the plan it did not grade as not run."""
        from conformance.lifecycle import not_run

        name = signal.Signals(self.signum).name
        result.interrupted = name
        graded = {c.case: c for c in result.cases}
        note = f"not run: the run was interrupted by {name}"
        result.cases = [graded.get(f"{case.id}@v{protocol}")
                        or not_run(case, protocol, note, cut=name)
                        for protocol, case in self.config.stash[STATE].plan]

    def agent_behind(self) -> Any:
        """The real agent's result behind a proxy, masked (None: no agent behind)."""
        if not self.agents:
            return None
        masker = self.config.stash[STATE].run.masker
        result = self.result(behind=True)
        return masker.data(result) if masker else result

    @pytest.hookimpl(tryfirst=True)  # before --junitxml writes its file
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(self.config, "workerinput"):  # an xdist worker: the controller reports
            return
        if self.signum:  # 128+N, as the command line exits when interrupted
            session.exitstatus = 128 + self.signum
            self.junit_interrupted(signal.Signals(self.signum).name)
        opt = self.config.getoption
        from conformance.report.formats import FORMATS, Inputs, behind_paths, write_reports

        paths = {f.name: opt("acp_" + f.name) for f in FORMATS if "plugin" in f.shells}
        if not (any(paths.values()) or opt("acp_certify") or opt("acp_badge")):
            return
        from conformance.report.heading import with_label
        from conformance.report.traceability import traceability

        state = self.config.stash[STATE]
        result = self.result()
        if state.run.masker:  # secrets out of the reports, as on the command line
            result = state.run.masker.data(result)
        with_label(result, opt("acp_target_name"), opt("acp_target_version"))
        verdict = state.baseline.evaluate(result.cases) if state.baseline is not None else None
        write_reports(result, paths, Inputs(baseline=verdict,
                                            trace=lambda: traceability(state.cases)))
        agent = self.agent_behind()
        if agent is not None:  # beside the proxy's, as the command line writes it
            write_reports(agent, behind_paths(paths, agent.role), Inputs())
        self.certify(result)

    def junit_interrupted(self, name: str) -> None:
        """pytest's ``--junitxml`` says so too, as the command line's JUnit does: the
        test suite's properties ``verdict`` (interrupted) and ``interrupted`` (the signal)."""
        from _pytest.junitxml import xml_key  # pytest's own writer; no public handle to it

        xml = self.config.stash.get(xml_key, None)
        if xml is not None:
            xml.add_global_property("verdict", "interrupted")
            xml.add_global_property("interrupted", name)

    def certify(self, result: Any) -> None:
        """``--acp-certify DIR`` and ``--acp-badge PATH``, as the command line writes them."""
        import shlex

        opt = self.config.getoption
        if opt("acp_certify"):
            from conformance.certify import write_bundle

            masker = self.config.stash[STATE].run.masker
            line = shlex.join(["pytest", *self.config.invocation_params.args])
            write_bundle(Path(opt("acp_certify")), result,
                         {c.case: c.transcript_path for c in result.cases},
                         command_line=masker.text(line) if masker else line,
                         badge=Path(opt("acp_badge")) if opt("acp_badge") else None)
        elif opt("acp_badge"):
            from conformance.certify.badge import write_badge
            from conformance.certify.bundle import bundle_verdict

            write_badge(result, Path(opt("acp_badge")), bundle_verdict(result))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if hasattr(self.config, "workerinput") or not (self.cases or self.signum):
            return
        state = self.config.stash[STATE]
        result = self.result()
        counts = result.counts()
        masker = state.run.masker
        say = (lambda line: terminalreporter.write_line(masker.text(line))) if masker else \
            terminalreporter.write_line  # secrets out of the console too, as on the command line
        terminalreporter.section("acp-conformance")
        say(f"{len(result.cases)} case(s) against {state.label}: "
            + ", ".join(f"{counts[k]} {k}" for k in ("fail", "warn", "info", "pass") if counts[k]))
        for why in result.unfinished.values():  # as the command line says it
            say(f"not tested: {why}")
        from conformance.report.coverage import headline

        say(f"verdict: {headline(result)}")  # the claim of what was measured, as everywhere
        if state.baseline is not None:
            for line in state.baseline.evaluate(result.cases).lines():
                say(line)
        from conformance.report.formats import FORMATS

        for key in (*("acp_" + f.name for f in FORMATS if "plugin" in f.shells),
                    "acp_certify", "acp_badge"):
            if self.config.getoption(key):
                say(f"{key[4:]} report: {self.config.getoption(key)}")
        agent = self.agent_behind()
        if agent is not None:  # apart: the session grades the proxy
            from conformance.report import console_summary

            terminalreporter.section("acp-conformance: the agent behind the proxy")
            say("its own findings, graded on what it wrote before the proxy; not the proxy's")
            for line in console_summary(agent, colour=False, show="failures").splitlines():
                say(line)
