"""A tiny seccomp-BPF filter that forbids creating processes, namespaces and mounts (registers nothing).

``RLIMIT_NPROC`` is left unset where every sandbox is the same host uid (started by root: it would
count all concurrent sandboxes together), so the sandbox stops fork bombs with a filter instead:
``fork``/``vfork`` and ``clone`` without ``CLONE_THREAD`` fail with EPERM (threads still work);
``clone3``, whose flags a classic BPF filter cannot read, fails with ENOSYS, so glibc falls back to
``clone``. ``unshare``, ``setns``, ``mount``, ``umount2`` and ``pivot_root`` fail with EPERM: a new
user namespace would give the program capabilities inside it, enough to mount a tmpfs and fill host
memory past its address-space limit. ``add_key``, ``request_key`` and ``keyctl`` fail too: the kernel
keyring of the program's uid outlives it, so one program could leave data there for a later one
(every sandbox is the same uid when started by root). ``shmget``, ``msgget`` and ``semget`` fail too:
System V shared memory and message queues live outside the address-space limit (a program filled
host memory with 150 MB segments under a 200 MB limit). So do ``ptrace`` and
``process_vm_readv``/``writev``: the program could stop or use bwrap's pid 1, which has none of the
prelude's limits. ``io_uring_setup``/``enter``/``register``, ``memfd_create`` and ``memfd_secret``
fail too: a ring keeps files alive after the program closes them, so memfds parked in rings held
gigabytes of host memory that neither the address-space nor the open-files limit counts (a review
held 3 GiB under a 1 GiB limit). ``prctl(PR_SET_PDEATHSIG)`` fails too: started by a user, the program
is the sandbox's pid 1 (``isolation``), and its parent-death signal is what ends it when the host kills
bwrap; a review cleared it and lived on after the reward returned. bubblewrap installs the program
(``--seccomp FD``) right before it executes the sandboxed interpreter.
"""

from __future__ import annotations

import errno
import platform
import struct

# BPF opcodes (linux/filter.h) and seccomp constants (linux/seccomp.h, linux/audit.h)
_LD_W_ABS, _JEQ_K, _JSET_K, _JGE_K, _RET_K = 0x20, 0x15, 0x45, 0x35, 0x06
_RET_ALLOW, _RET_ERRNO, _RET_KILL = 0x7FFF0000, 0x00050000, 0x80000000
_OFF_NR, _OFF_ARCH, _OFF_ARG0 = 0, 4, 16  # struct seccomp_data; arg0 low word (little-endian)
_CLONE_THREAD = 0x00010000
_X32_BIT = 0x40000000

# machine -> (audit arch, clone, clone3, denied: fork, vfork, unshare, setns, mount, umount2, pivot_root,
# add_key, request_key, keyctl; shmget, msgget, semget, ptrace, process_vm_readv, process_vm_writev;
# io_uring_setup, io_uring_enter, io_uring_register (one number on every architecture); memfd_create,
# memfd_secret)
_IO_URING = (425, 426, 427)
_PRCTL = {"x86_64": 157, "aarch64": 167}
_PR_SET_PDEATHSIG = 1
_ARCHES: dict[str, tuple[int, int, int, tuple[int, ...]]] = {
    "x86_64": (0xC000003E, 56, 435, (57, 58, 272, 308, 165, 166, 155, 248, 249, 250, 29, 68, 64, 101, 310, 311,
                                     *_IO_URING, 319, 447)),
    "aarch64": (0xC00000B7, 220, 435, (97, 268, 40, 39, 41, 217, 218, 219,  # no fork/vfork syscalls
                                       194, 186, 190, 117, 270, 271, *_IO_URING, 279, 447)),
}


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def no_fork_filter(machine: str | None = None) -> bytes | None:
    """Return the compiled filter for this machine, or None where the architecture is not supported.

    Args:
        machine: ``platform.machine()`` value; defaults to the running machine.
    """
    machine = machine or platform.machine()
    spec = _ARCHES.get(machine)
    if spec is None:
        return None
    arch, clone, clone3, denied = spec
    deny, enosys = _RET_ERRNO | errno.EPERM, _RET_ERRNO | errno.ENOSYS
    prog = [
        _insn(_LD_W_ABS, _OFF_ARCH),
        _insn(_JEQ_K, arch, jt=1),
        _insn(_RET_K, _RET_KILL),  # foreign ABI (e.g. i386 int 0x80): kill
        _insn(_LD_W_ABS, _OFF_NR),
        _insn(_JGE_K, _X32_BIT, jf=1),
        _insn(_RET_K, _RET_KILL),  # x32 syscalls
        _insn(_JEQ_K, clone3, jf=1),
        _insn(_RET_K, enosys),
    ]
    for nr in denied:
        prog += [_insn(_JEQ_K, nr, jf=1), _insn(_RET_K, deny)]
    prog += [  # prctl: PR_SET_PDEATHSIG denied, every other option allowed
        _insn(_JEQ_K, _PRCTL[machine], jf=4),
        _insn(_LD_W_ABS, _OFF_ARG0),
        _insn(_JEQ_K, _PR_SET_PDEATHSIG, jf=1),
        _insn(_RET_K, deny),
        _insn(_RET_K, _RET_ALLOW),
    ]
    prog += [
        _insn(_JEQ_K, clone, jf=3),
        _insn(_LD_W_ABS, _OFF_ARG0),
        _insn(_JSET_K, _CLONE_THREAD, jt=1),
        _insn(_RET_K, deny),
        _insn(_RET_K, _RET_ALLOW),
    ]
    return b"".join(prog)
