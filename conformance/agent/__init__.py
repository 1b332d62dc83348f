"""The agent role: the suite plays the client against an agent. ``driver`` (one connection's
state machine), ``steps`` (the one step vocabulary of cases and the fuzzer) and ``player``
(``StepDriver``, which plays those steps).
"""
