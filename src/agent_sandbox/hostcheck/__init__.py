"""``sandbox verify``: the isolation self-check of one host, judged from outside
the sandbox, and the drift of installed files from the render manifest.

(The audit chain's own verification is ``agent_sandbox.audit.verifier``.)
"""
