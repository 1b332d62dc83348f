"""The proxy role: the suite plays both ends of a proxy, bridge or gateway.

Its client driver (:mod:`conformance.agent.driver`) talks to the proxy's stdin and
stdout; behind the proxy, where its command says ``{agent}``, runs the recording
shim (:mod:`conformance.proxy.shim`) and, behind that, the suite's agent double
playing scripted streams or a real agent (``--agent``). Both sides become
transcripts (:mod:`conformance.proxy.sides`); :func:`conformance.checks.proxy.grade_proxy`
compares them. The runner (:mod:`conformance.proxy.runner`) grades nothing itself.
"""
