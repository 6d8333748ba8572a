"""The folder queue: escalated requests, their decisions and their results,
coordinated only through atomic file operations under ``.sandbox/escalations``.

Layout (every record is one JSON file named ``<id>.json``)::

    pending/   a request waiting for a decision            (created by link)
    decided/   the one decision on it: approve, deny,       (created by link:
               timeout, cancel                               the first one wins)
    claimed/   an approved request taken by one executor    (rename from pending;
               ``<id>.owner.<pid>`` names the executor)
    spent/     the approval was used: who used it and for   (created by link,
               what (run, grant, refused, expired)            never deleted)
    done/      the terminal record: request, decision and   (created by link:
               result, with a ``status``                     written exactly once)

Guarantees, with any process killed at any moment and any interleaving:

- a decision is made once (``link`` fails for the second decider), is bound to
  the SHA-256 of the exact tool, parameters and working directory, and expires;
  an approval for a request whose hook stopped waiting is refused and the
  request cancelled, so nothing waits approvable with nobody to receive it;
- an approval is used at most once: the only way to run a command or use a
  grant is to win the exclusive creation of ``spent/<id>.json``, which nothing
  ever deletes (the files in ``pending/`` and ``claimed/`` may be moved back by
  a recovery racing with an executor; ``spent/`` cannot be);
- every request reaches exactly one terminal record in ``done/``;
  ``recover()`` (run by every approver and server, safe to run concurrently)
  finishes what a killed process left: an approval whose executor died before
  using it goes back to ``pending/`` to be run, one whose user died after
  using it is recorded as ``interrupted`` (never run a second time).

Every rename, unlink, link and exclusive create goes through ``Seam``, so a
test can pause each process at each step and drive every interleaving.

Statuses in ``done/``: completed, granted, denied, timed_out, cancelled,
expired, refused, interrupted, failed.

Nothing here decides policy and nothing here runs a command: the executor
function is passed in (``approval.executor.execute_request``), and nothing here
imports the approval loop, the actions or the runtime.

The names below are the package's public face; behind it, ``folder``
(``FolderQueue``, ``queue_for``), ``records`` (ids, the request hash, states and
statuses), ``seam`` (process liveness and the test hook), ``content`` (the tree a
command request is bound to), ``shown`` (what every view shows of a request) and
``notify`` (inotify waits).
"""

from __future__ import annotations

from .folder import FolderQueue, queue_for
from .records import (
    DECISIONS,
    STATES,
    TERMINAL,
    QueueError,
    new_id,
    request_hash,
    use_key_of,
    valid_id,
)
from .seam import REAL, Seam, alive, me, proc_start

__all__ = [
    "DECISIONS",
    "REAL",
    "STATES",
    "TERMINAL",
    "FolderQueue",
    "QueueError",
    "Seam",
    "alive",
    "me",
    "new_id",
    "proc_start",
    "queue_for",
    "request_hash",
    "use_key_of",
    "valid_id",
]
