"""The descriptors one start of bwrap is made with (``bwrap.run.BwrapRun``)."""

from __future__ import annotations

import os

from ..process import suppress
from . import argv as bwargv


class StartFds:
    """The descriptors of one start: the seccomp filter's memfd and the four pipes
    bwrap is started with (its info, its block fd, the start gate and the gate's
    "ready"). Each is closed once: bwrap's ends when it holds them
    (``close_given``), the rest when the start is over (``close``)."""

    def __init__(self, sfd: int) -> None:
        self.sfd = sfd
        self.info_r, self.info_w = os.pipe()
        self.block_r, self.block_w = os.pipe()
        self.gate_r, self.gate_w = os.pipe()
        self.ready_r, self.ready_w = os.pipe()

    def given(self) -> tuple[int, ...]:
        """bwrap's ends, in the order of ``argv.CHILD_FDS``."""
        return (self.sfd, self.info_w, self.block_r, self.gate_r, self.ready_w)

    def for_bwrap(self) -> bwargv.Fds:
        return bwargv.Fds(seccomp=self.sfd, info=self.info_w, block=self.block_r,
                          gate=self.gate_r, ready=self.ready_w)

    def close_given(self) -> None:
        for fd in (self.info_w, self.block_r, self.gate_r, self.ready_w, self.sfd):
            os.close(fd)
        self.info_w = self.block_r = self.gate_r = self.ready_w = self.sfd = -1

    def close(self) -> None:
        for fd in (self.info_r, self.info_w, self.block_r, self.block_w, self.gate_r,
                   self.gate_w, self.ready_r, self.ready_w, self.sfd):
            if fd >= 0:
                with suppress(OSError):
                    os.close(fd)
