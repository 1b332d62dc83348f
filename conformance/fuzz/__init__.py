"""The fuzzer: Hypothesis-driven sessions against agents and clients.

* :mod:`conformance.fuzz.settings` - effort profiles (ci, dev, deep), seeds, budget.
* :mod:`conformance.fuzz.prompts` - what the suite sends an agent (prompt strategies).
* :mod:`conformance.fuzz.steps` - the recorded, replayable steps of agent fuzzing.
* :mod:`conformance.fuzz.agent_machine` - the state machine over a live agent.
* :mod:`conformance.fuzz.regressions` - fingerprints, the regression library, replay.

Importing this package imports nothing heavy; Hypothesis loads with the modules
that need it.
"""
