"""The names the suite's own traffic uses, shared by the side that plays it and the side
that grades it: the probe and ping requests, and the control-stream convention.

A client case whose rule names a cause plays each turn twice: the probe, then its
control, the same arrangement with ordinary IDs and :data:`CONTROL_PREFIX` before
every text. ``client/script.py`` builds the control; ``checks/controls.py``
decides the cause against it. The agent double sends :data:`PROBE_METHOD` after a
turn (a request the client must answer: MID-C-08/probe), and the agent fuzzer sends
:data:`PING` to learn that the agent has caught up. Every side imports these names
from here, so grading never imports the client side and the agent double stays light.
"""

from __future__ import annotations

CONTROL_PREFIX = "Ctrl "  # a plain word: profiles often skip lines that start with a bracket
CONTROL_ID = "ctl"  # control IDs: ctl<turn>-<nnn>, numbered in order of first appearance
#: Rules whose findings name a cause (an ID transform, null, a malformed or empty ID, an
#: invalid v2 chunk): each is decided against a control stream (conformance.checks.controls).
CAUSE_RULES = ("MID-C-02", "MID-C-04", "MID-S-02", "MID-C-05", "MID-S-03", "MID-C-06",
               "MID-V2-07")

#: The request the agent double sends after a turn; any answer shows the client is live.
PROBE_METHOD = "_acp_mid/ping"
PROBE_ID_PREFIX = "probe-"  # the JSON-RPC IDs of those requests: probe-1, probe-2, ...
#: The agent fuzzer's extension request: any answer means the agent has caught up.
PING = "_acp_conformance/ping"
