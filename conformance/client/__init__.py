"""The client suite: the suite plays the agent and watches what an ACP client shows.

Data flow, one way: ``script`` (client cases' streams, expanded per protocol)
-> ``double`` (the agent double: a process the client under test spawns, or
the same engine in-process) -> ``channel`` (the double reports every wire line
back to the suite) -> ``pty`` / ``adapter`` (drive the client, read back what
it shows) -> the transcript -> ``conformance.checks.observe`` (reference
reducer and the comparison, pure grading) -> results. ``runner`` ties it together.

Importing this package is cheap and starts no process.
"""
