"""Web approvals: ``sandbox serve``, a REST API, live WebSocket events and a dashboard
over the same folder queue and audit as ``sandbox watch``, with no state of its own.

One concept per module: ``auth`` (the approvers' bearer token and who it names),
``sites`` (the repositories served: their requests, as every view shows them, and
their audit), ``schemas`` (the API's documents), ``routes`` (the REST endpoints),
``events`` (queue changes pushed over the WebSocket), ``webhook`` (the optional
Slack-compatible notice of a new escalation), ``app`` (the application put
together, the dashboard's static files), ``server`` (binding and running it).

Approving goes through ``approval.approver.Approver`` and nothing else: nothing here writes a
decision. Importing this package imports nothing: FastAPI is loaded only by
``sandbox serve`` (never by the hook, ``sandbox --help`` or any other command).
"""
