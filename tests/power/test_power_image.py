"""The power cut itself, on a real ext4 image on a real loop device: what was fsynced survives it,
what was only written does not, and nothing stays mounted or attached afterwards, even when the
code inside fails."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from chaos.hostfaults.power import PowerImage, PowerUnavailable, power_missing, sync_tree


def _attached(image: str) -> bool:
    return image in subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout


def test_a_power_cut_keeps_what_was_fsynced_and_loses_what_was_only_written(power, tmp_path):
    with PowerImage(str(tmp_path)) as image:
        durable, volatile = os.path.join(image.mount, "durable"), os.path.join(image.mount, "volatile")
        with open(durable, "wb") as f:
            f.write(b"kept")
        sync_tree(image.mount)
        with open(volatile, "wb") as f:
            f.write(b"lost")  # in the page cache only: a SIGKILL would keep it, a power cut does not
        image.cut()
        image.restore()
        with open(durable, "rb") as f:
            assert f.read() == b"kept"
        assert not os.path.exists(volatile) or os.path.getsize(volatile) == 0
        assert image.cuts == 1


def test_nothing_stays_mounted_or_attached_after_a_failure_inside(power, tmp_path):
    with pytest.raises(ZeroDivisionError):
        with PowerImage(str(tmp_path)) as image:
            backing = image.image
            assert _attached(backing)
            1 / 0
    assert not _attached(backing)
    assert not os.path.ismount(image.mount)
    assert not os.path.exists(image.directory)


def test_restoring_with_a_file_still_open_names_the_problem(power, tmp_path):
    with PowerImage(str(tmp_path)) as image:
        held = open(os.path.join(image.mount, "held"), "wb")
        try:
            image.cut()
            with pytest.raises(PowerUnavailable, match="still holds a file on it"):
                image.restore()
        finally:
            held.close()
        image.restore()  # once the file is closed the power comes back


def test_without_root_the_reason_says_what_is_needed(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    reason = power_missing()
    assert reason is not None
    assert reason.startswith("the power fault needs root")
    assert "leave the power fault kind out" in reason


def test_the_power_fault_is_refused_on_postgresql_saying_where_it_runs_there():
    from chaos.hostfaults.faults import refuse_on_a_server

    with pytest.raises(ValueError, match="power fault kind .power-full. cannot run on PostgreSQL") as caught:
        refuse_on_a_server(["power-full"], "postgresql://admin@db.test/postgres")
    assert "--power-every" in str(caught.value)


HOLD_AN_IMAGE = """
import sys, time
from chaos.hostfaults.power import PowerImage
with PowerImage(sys.argv[1]) as image:
    print(image.image, flush=True)
    time.sleep(60)
"""


def test_a_sigterm_still_unmounts_and_detaches_the_image(power, tmp_path):
    import signal

    proc = subprocess.Popen([sys.executable, "-c", HOLD_AN_IMAGE, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        backing = proc.stdout.readline().strip()
        assert _attached(backing)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not _attached(backing)


NOT_ROOT_MATRIX = """
import os, sys
os.geteuid = lambda: 1000  # as an ordinary user
sys.argv = ["chaos", "matrix", "--faults", "power", "--family", "clean"]
from chaos.__main__ import main  # the command line's own process: it runs the matrix itself, as ordinary user too
sys.exit(main())
"""


def test_the_matrix_refuses_the_power_fault_without_root_in_one_line_with_exit_2():
    done = subprocess.run([sys.executable, "-c", NOT_ROOT_MATRIX], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: the power fault needs root (to attach a loop device and mount it)")
    assert lines[0].endswith("run it as root on Linux, or leave the power fault kind out")
