"""A simulated power cut: a small ext4 image on a loop device, shut down without flushing its log.

A SIGKILL leaves the kernel and its page cache alive, so every ``write()`` that returned survives
it even if nothing was ever fsynced. A power cut does not: what was not on the disk is gone. File
system test suites simulate one (xfstests' ``godown``) with the ``EXT4_IOC_SHUTDOWN`` ioctl and
``EXT4_GOING_FLAGS_NOLOGFLUSH``: the file system stops at once, its journal is not flushed, and
dirty pages are never written back. Unmounting and mounting it again replays the journal up to the
last commit that reached the disk, exactly what the machine would find after the power came back.

:class:`PowerImage` owns that lifecycle: a sparse image file, ``mkfs.ext4``, ``losetup``,
``mount``; :meth:`PowerImage.cut` shuts the file system down, :meth:`PowerImage.restore` unmounts
and mounts it again; :meth:`PowerImage.close` (also from ``atexit``, and on every failure) unmounts
and detaches, so no loop device is ever left attached. It needs root, loop devices and
e2fsprogs: :func:`power_missing` says what is missing, in one line.

>>> POWER_KINDS
('power-full', 'power-normal')
>>> LEVEL_OF["power-normal"]
'NORMAL'
"""

from __future__ import annotations

import atexit
import fcntl
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

__all__ = [
    "EXT4_IOC_SHUTDOWN",
    "GOING_FLAGS_NOLOGFLUSH",
    "LESSONS",
    "LEVEL_OF",
    "POWER_KINDS",
    "PowerImage",
    "PowerUnavailable",
    "power_missing",
    "sync_tree",
]

# _IOR('X', 125, __u32): the ioctl that xfstests' godown sends.
EXT4_IOC_SHUTDOWN = 0x8004587D
GOING_FLAGS_DEFAULT = 0  # flush everything first: a clean shutdown, not a power cut
GOING_FLAGS_LOGFLUSH = 1  # flush the journal, not the data
GOING_FLAGS_NOLOGFLUSH = 2  # flush nothing: the power cut
IMAGE_MB_DEFAULT = 16
COMMAND_TIMEOUT_S = 30.0
ATTACH_TRIES_MAX = 5  # parallel test processes race for the next free loop device

# The sub-kinds of the power fault: one per synchronous level that teaches something. OFF is
# measured (python -m benchmarks) but not a matrix fault: with OFF the engine promises nothing
# across a power cut, so there is nothing to check but the loss itself.
LEVEL_OF = {"power-full": "FULL", "power-normal": "NORMAL"}
POWER_KINDS = tuple(LEVEL_OF)
LESSONS = {
    "power-full": "With synchronous=FULL every commit that returned is on the disk: a power cut loses no acknowledged commit, and recovery resumes from exactly where the worker was.",
    "power-normal": "With synchronous=NORMAL a power cut may roll back the last commits, never corrupt the file: a lost memo is an interruption, paid again and sent again under the same key, applied once.",
}

_ATTACHED: dict[int, "PowerImage"] = {}  # id -> image still attached in this process (atexit detaches them)


class PowerUnavailable(RuntimeError):
    """This machine cannot simulate a power cut (not root, no loop device, no mkfs.ext4)."""


def power_missing() -> str | None:
    """Why a power cut cannot be simulated here, in one line; None if it can.

    >>> power_missing() is None or "power fault needs" in power_missing()
    True
    """
    needs = []
    if os.geteuid() != 0:
        needs.append("root (to attach a loop device and mount it)")
    if not os.path.exists("/dev/loop-control"):
        needs.append("loop devices (/dev/loop-control; modprobe loop)")
    for tool in ("mkfs.ext4", "losetup", "mount", "umount"):
        if shutil.which(tool) is None:
            needs.append(f"{tool} (Debian: apt-get install {'e2fsprogs' if tool.startswith('mkfs') else 'mount'})")
    if not needs:
        return None
    return ("the power fault needs " + ", ".join(needs) + ": it cuts the power of an ext4 image on a loop device; "
            "run it as root on Linux, or leave the power fault kind out")


def _run(*command: str) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    if done.returncode != 0:
        raise PowerUnavailable(f"{' '.join(command)} failed with status {done.returncode}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout.strip()


def _attach(image: str) -> str:
    """``losetup --find --show``, again if another process took the free device first."""
    for attempt in range(ATTACH_TRIES_MAX):
        try:
            return _run("losetup", "--find", "--show", image)
        except PowerUnavailable:
            if attempt + 1 == ATTACH_TRIES_MAX:
                raise
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")


def sync_tree(path: str) -> None:
    """fsync every file under ``path`` and the directories themselves: what a power cut must keep."""
    for root, dirs, files in os.walk(path):
        for name in files:
            if not os.path.isfile(os.path.join(root, name)) or os.path.islink(os.path.join(root, name)):
                continue  # a server's socket, a link: nothing of its own to keep
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fd = os.open(root, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class PowerImage:
    """An ext4 file system of its own, on a loop device, whose power the harness can cut.

    ``with PowerImage(directory) as image:`` creates ``directory/power.img``, formats it, attaches
    it and mounts it on ``image.mount``; leaving the block unmounts it, detaches the loop device
    and removes the image, whatever happened inside.
    """

    def __init__(self, directory: str, *, size_mb: int = IMAGE_MB_DEFAULT) -> None:
        if size_mb < 8:
            raise ValueError(f"size_mb={size_mb}: an ext4 image with a journal needs at least 8 MB")
        self.directory = tempfile.mkdtemp(prefix="power-", dir=directory)
        os.chmod(self.directory, 0o755)  # a server on the image may run as a user of its own
        self.image = os.path.join(self.directory, "power.img")
        self.mount = os.path.join(self.directory, "mnt")
        self.size_mb = size_mb
        self.loop: str | None = None
        self.mounted = False
        self.cuts = 0

    def __enter__(self) -> "PowerImage":
        self.open()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def open(self) -> None:
        reason = power_missing()
        if reason:
            raise PowerUnavailable(reason)
        _exit_on_sigterm()
        os.makedirs(self.mount, exist_ok=True)
        try:
            with open(self.image, "wb") as f:
                f.truncate(self.size_mb << 20)
            # No lazy initialisation: a background thread writing the inode tables would race the cut.
            _run("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", self.image)
            self.loop = _attach(self.image)
            _ATTACHED[id(self)] = self
            self._mount()
        except BaseException:
            self.close()
            raise

    def _mount(self) -> None:
        assert self.loop is not None, "mount needs an attached loop device"
        _run("mount", "-t", "ext4", self.loop, self.mount)
        self.mounted = True

    def cut(self) -> None:
        """Cut the power: shut the file system down at once, its journal unflushed (godown)."""
        if not self.mounted:
            raise PowerUnavailable(f"{self.mount} is not mounted: nothing to cut")
        fd = os.open(self.mount, os.O_RDONLY)
        try:
            fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", GOING_FLAGS_NOLOGFLUSH))
        finally:
            os.close(fd)
        self.cuts += 1

    def restore(self) -> None:
        """The power comes back: unmount the dead file system, mount it again (the journal replays).

        Every file on it must be closed first (a process that still holds one keeps the old,
        shut-down file system alive, and the mount would not be a fresh one).
        """
        try:
            _run("umount", self.mount)
        except PowerUnavailable as exc:
            holders = subprocess.run(["fuser", "-vm", self.mount], capture_output=True, text=True).stderr.strip()
            raise PowerUnavailable(f"{exc}; a process still holds a file on it (close it before the power comes back): {holders}") from exc
        self.mounted = False
        self._mount()

    def close(self) -> None:
        """Unmount, detach the loop device and remove the image; safe to call twice.

        SIGTERM waits while it runs: a second one (a pool terminating its workers) arriving
        between the unmount and the detach would leave the loop device attached."""
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        try:
            self._close()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def _close(self) -> None:
        try:
            if self.mounted:
                done = subprocess.run(["umount", self.mount], capture_output=True, timeout=COMMAND_TIMEOUT_S)
                if done.returncode != 0:  # a file still open: detach it lazily, never leave it mounted
                    holders = subprocess.run(["fuser", "-vm", self.mount], capture_output=True, text=True).stderr.strip()
                    subprocess.run(["umount", "-l", self.mount], capture_output=True, timeout=COMMAND_TIMEOUT_S)
                    # The loop device goes once the last holder closes its files (losetup -d below
                    # marks it for that); say who holds it, since a process that never exits keeps it.
                    print(f"warning: {self.mount} was busy at unmount; detached lazily. Holders: {holders[-500:]}", file=sys.stderr)
                self.mounted = False
            if self.loop is not None:
                subprocess.run(["losetup", "-d", self.loop], capture_output=True, timeout=COMMAND_TIMEOUT_S)
                self.loop = None
        finally:
            _ATTACHED.pop(id(self), None)
            shutil.rmtree(self.directory, ignore_errors=True)


def _exit_on_sigterm() -> None:
    """A SIGTERM (a CI job cancelled, ``kill``) ends the process without running ``finally`` or
    ``atexit``; while an image is attached, it raises SystemExit instead, so both run and the image is
    unmounted and detached. A handler someone else installed is left alone."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminated)


def _terminated(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


@atexit.register
def _detach_all() -> None:
    """A harness that fails half-way still unmounts and detaches what it attached."""
    for image in list(_ATTACHED.values()):
        image.close()
