"""The fuzzer: Hypothesis-driven sessions against agents and clients.

* :mod:`conformance.fuzz.settings` - effort profiles (ci, dev, deep), seeds, budget.
* :mod:`conformance.fuzz.prompts` - what the suite sends an agent (prompt strategies).
* :mod:`conformance.agent.steps` - the recorded, replayable steps of agent fuzzing.
* :mod:`conformance.fuzz.player` - playing steps against a live agent.
* :mod:`conformance.fuzz.agent_machine` - the state machine over a live agent.
* :mod:`conformance.fuzz.agent_fuzz` - the run around it: search, stored cases, shrinking.
* :mod:`conformance.fuzz.client_fuzz` - generated streams against a client.
* :mod:`conformance.fuzz.grading` - how both fuzzers and replay grade a run.
* :mod:`conformance.fuzz.shapes` - counterexample shapes and fingerprints.
* :mod:`conformance.fuzz.regressions` - the regression library, replay.

The engines take typed settings; the ``fuzz`` and ``replay`` subcommands
(:mod:`conformance.cli.fuzz`, :mod:`conformance.cli.replay`) build them from
the command line.

Importing this package imports nothing heavy; Hypothesis loads with the modules
that need it.
"""
