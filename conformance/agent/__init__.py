"""The agent role: the suite plays the client against an agent. ``driver`` (``ClientDriver``,
one connection's state machine, in layers: ``connection`` the JSON-RPC pump and its waits,
``handshake``, ``turns`` the turn tracking, and ``faults`` how a drive ends early), ``steps``
(the one step vocabulary of cases and the fuzzer) and ``player`` (``StepDriver``, which plays
those steps).
"""
