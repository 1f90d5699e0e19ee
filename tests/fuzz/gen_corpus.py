#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""Write the seed corpus for fuzz_emu into tests/fuzz/corpus/.

The byte format is defined in fuzz_emu.c (enum of OP_* and their arguments);
keep the two in sync. Each seed is a short, valid driver session, so the
fuzzer starts from inputs that get past controller enable and queue creation
and mutates from there.  Usage: gen_corpus.py [OUTDIR]
"""
import os
import struct
import sys

(OP_REG32, OP_SQE_RAW, OP_BYTES, OP_DOORBELL, OP_ENABLE, OP_ADMIN, OP_IO,
 OP_CREATE_QP, OP_CONSUME, OP_POLL, OP_FAULT, OP_CC) = range(12)

DATA_OFF = 0x20000
PAGE = 4096


def cfg(dstrd=0, mdts=0, vwc=1):
    return bytes([dstrd | mdts << 2 | vwc << 4])


def enable(asqs=31, acqs=31, flags=0):
    return bytes([OP_ENABLE, asqs, acqs, flags])


def admin(opc, nsid=0, cdw10=0, cdw11=0, prp1=0, prp2=0):
    return bytes([OP_ADMIN, opc, nsid]) + struct.pack('<II', cdw10, cdw11) + bytes([prp1, prp2])


def io(q, opc, nsid, slba=0, nlb=0, prp1=0, prp2=1, ctl=0):
    # q: byte % 5 picks the queue, so q itself
    return bytes([OP_IO, q, opc, nsid]) + struct.pack('<HH', slba, nlb) + bytes([prp1, prp2, ctl])


def create_qp(q, qsize=15, flags=0):
    return bytes([OP_CREATE_QP, q - 1, qsize, flags])


def consume(q):
    return bytes([OP_CONSUME, q])


def poll(n=1):
    return bytes([OP_POLL, n - 1])


def doorbell(qid, cq, val):
    return bytes([OP_DOORBELL, qid << 1 | cq]) + struct.pack('<H', val)


def arena_bytes(off, data):
    assert off % 4 == 0 and len(data) < 256
    return bytes([OP_BYTES]) + struct.pack('<H', off // 4) + bytes([len(data)]) + data


def fault(kind, a=0, b=0, c=0):
    return bytes([OP_FAULT, kind, a]) + struct.pack('<H', b) + bytes([c])


def cc(what):
    return bytes([OP_CC, what])


def reg32(off, val):
    # controller registers (off < 0x40) through the bit-15 selector
    sel = 0x8000 | off // 4 if off < 0x40 else off // 4
    return bytes([OP_REG32]) + struct.pack('<HI', sel, val)


NUM_QUEUES = admin(0x09, 0, 0x07, 0x00030003)  # Set Features, Number of Queues


def bringup(nq=1, qsize=15):
    s = enable() + NUM_QUEUES + poll(2) + consume(0)
    for q in range(1, nq + 1):
        s += create_qp(q, qsize)
    return s + poll(2) + consume(0)


SEEDS = {
    'identify': cfg() + enable() + admin(0x06, 0, 0x01) + admin(0x06, 1, 0x00, 0, 1) +
    admin(0x06, 0, 0x02, 0, 2) + poll(2) + consume(0),
    'read_512': cfg() + bringup() + io(1, 0x02, 1, 0, 7, 0) + poll(2) + consume(1),
    'write_read_4k': cfg() + bringup() + arena_bytes(DATA_OFF, b'\xa5' * 64) +
    io(1, 0x01, 2, 3, 0, 0) + io(1, 0x02, 2, 3, 0, 1) + poll(3) + consume(1),
    # 16 KiB read with a PRP list in data page 10 pointing at pages 1..3
    'prp_list': cfg() + bringup() +
    arena_bytes(DATA_OFF + 10 * PAGE,
                struct.pack('<QQQ', *[0x100000 + DATA_OFF + i * PAGE for i in (1, 2, 3)])) +
    io(1, 0x02, 2, 0, 3, 0, 10) + poll(2) + consume(1),
    'two_queues_null': cfg(mdts=1) + bringup(nq=2, qsize=7) +
    b''.join(io(1 + i % 2, 0x02, 3, i, 0, i) for i in range(12)) + poll(4) + consume(1) +
    consume(2) + poll(2) + consume(1) + consume(2),
    'media_fault': cfg() + bringup() + fault(1, 1, 0, 8) + io(1, 0x02, 1, 4, 0, 0) +
    io(1, 0x01, 1, 4, 0, 0) + poll(2) + consume(1) + fault(6),
    # CIDs count up from 0 per input over all queues (fuzz_emu.c submit()):
    # the read is CID 3, after Set Features and the two queue creations
    'drop_abort': cfg() + bringup() + fault(2, 1, 0, 1) + io(1, 0x02, 1, 0, 0, 0) + poll(2) +
    admin(0x08, 0, 1 | 3 << 16) + poll(2) + consume(0) + consume(1),
    'dsm_wz_flush': cfg() + bringup() +
    arena_bytes(DATA_OFF, struct.pack('<IIQ', 0, 8, 0)) +
    io(1, 0x09, 1, 0, 0, 0, 1, 0x00) + io(1, 0x08, 2, 0, 3) + io(1, 0x00, 0xff) + poll(2) +
    consume(1),
    'aer_bad_doorbell': cfg() + enable() + admin(0x0c) + doorbell(3, 0, 3) + doorbell(7, 1, 1) +
    poll(3) +
    consume(0) + admin(0x02, 0xff, 0x01 | 15 << 16, 0, 3) + poll(2) + consume(0),
    'delete_and_shutdown': cfg() + bringup() + admin(0x00, 0, 1) + admin(0x04, 0, 1) +
    poll(2) + consume(0) + cc(1) + poll(2) + cc(0) + poll(2),
    # 3-entry admin queue: two commands fit (§4.1.1), create_qp submits two
    'dstrd2_small_queues': cfg(dstrd=2, mdts=2) + enable(2, 2) + NUM_QUEUES + poll(1) +
    consume(0) + create_qp(1, 1) + poll(2) + consume(0) + io(1, 0x02, 2, 1) + poll(2) +
    consume(1) + io(1, 0x02, 2, 2) + poll(2) + consume(1),
    'bad_enable': cfg() + reg32(0x24, 0) + reg32(0x28, 0x100010) + reg32(0x14, 0x00460001) +
    poll(2) + cc(0) + poll(1) + enable(3, 3, 1) + poll(1),
    # 4 MiB read from the null namespace through the pre-filled, chained
    # PRP list pages 28-30 (fuzz_emu.c prefill_prp_lists), MDTS unlimited
    'prp_chain_4m': cfg(mdts=0) + bringup() + io(1, 0x02, 3, 0, 1023, 0, 30) + poll(2) +
    consume(1),
    # every enable refusal, one at a time, with recovery in between
    'enable_refusals': cfg() + b''.join(enable(3, 3, 1 << k) + cc(0) + poll(1) for k in range(1, 8)) +
    enable() + admin(0x06, 0, 0x01) + poll(1) + consume(0),
    'cfs_recover': cfg() + bringup() + fault(4) + io(1, 0x02, 1) + poll(2) + cc(0) + poll(2) +
    bringup() + io(1, 0x02, 1) + poll(2) + consume(1),
}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), 'corpus')
    os.makedirs(out, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(out, name), 'wb') as f:
            f.write(data)
    print(f'{len(SEEDS)} seeds in {out}')


if __name__ == '__main__':
    main()
