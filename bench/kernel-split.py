#!/usr/bin/env python3
"""Splits a proxy's CPU samples by what the kernel was doing for it.

Reads `perf script -F ip,sym` of a `perf record -g` of one process (call chains, the leaf
first; a blank line between samples) on standard input, and prints one Markdown row for
TARGET: the share of samples in each part, in the order of COLUMNS. Used by
bench/run-pgkernel.sh --profile.

A chain is put in the first part it matches:
- user space: the sample is outside the kernel;
- preempted: switched back in after a woken peer (the server, the client) took the CPU on
  the way out of a system call;
- sleeping: switched back in after waiting in epoll_wait;
- waking the peer: a send's loopback delivery waking the receiving socket's process
  (`sock_def_readable`, charged to the sender);
- TCP send, the rest: the rest of a send, the receiver's protocol processing included (on
  loopback the sender's system call runs it);
- TCP receive, epoll_wait, other kernel.
"""
import collections
import sys

COLUMNS = [
    "user space",
    "waking the peer",
    "TCP send, the rest",
    "preempted",
    "sleeping",
    "TCP receive",
    "epoll_wait",
    "other kernel",
]
KERNEL = 0xFFFF000000000000


def part(chain):
    """The part one sample's chain (leaf first: (in kernel, symbol)) belongs to."""
    if not chain[0][0]:
        return "user space"
    names = [sym for _, sym in chain]
    seen = set(names)
    if "__schedule" in names[:4] or any(n.startswith("finish_task_switch") for n in names[:2]):
        if "exit_to_user_mode_loop" in seen:
            return "preempted"
        if "ep_poll" in seen or "do_epoll_wait" in seen:
            return "sleeping"
        return "other kernel"
    if "sock_def_readable" in seen:
        return "waking the peer"
    if "__sys_sendto" in seen or "__x64_sys_sendto" in seen or "__sys_sendmsg" in seen:
        return "TCP send, the rest"
    if "__sys_recvfrom" in seen or "__x64_sys_recvfrom" in seen or "__sys_recvmsg" in seen:
        return "TCP receive"
    if "ep_poll" in seen or "do_epoll_wait" in seen:
        return "epoll_wait"
    return "other kernel"


def main():
    target = sys.argv[1] if len(sys.argv) > 1 else "?"
    counts = collections.Counter()
    chain = []
    for line in list(sys.stdin) + [""]:
        fields = line.split(None, 1)
        if not fields:
            if chain:
                counts[part(chain)] += 1
            chain = []
            continue
        if len(fields) < 2:
            continue
        try:
            ip = int(fields[0], 16)
        except ValueError:
            continue
        chain.append((ip >= KERNEL, fields[1].split("+")[0].strip()))
    total = sum(counts.values())
    if total == 0:
        sys.exit(f"kernel-split: no samples for {target}")
    cells = " | ".join(f"{100 * counts[c] / total:.1f} %" for c in COLUMNS)
    print(f"| {target} | {total} | {cells} |")


if __name__ == "__main__":
    main()
