/* SPDX-License-Identifier: MIT OR Apache-2.0 OR GPL-2.0 */
/*
 * ccp_priority.h: the application-priority extension of the CCP datapath -> agent IPC.
 *
 * Two audiences:
 *
 *  1. Datapaths built on libccp (ccp-kernel, mTCP, user-space stacks) build the PRIORITY
 *     message with ccp_priority_msg_write() and send it through the same channel and
 *     socket as their Create and Measure messages, e.g. from a libccp datapath:
 *
 *         char buf[CCP_PRIORITY_MSG_LEN];
 *         ccp_priority_msg_write(buf, conn->index, CCP_PRIO_SCAVENGER, 0, 0);
 *         dp->send_msg(dp, buf, CCP_PRIORITY_MSG_LEN);
 *
 *     The sid is libccp's connection index (the sid of the flow's Create). Send it after
 *     the Create; the agent keeps a priority that arrives before the Create for that sid.
 *
 *  2. Applications on the eBPF datapath (ccp-ebpf) set their socket's priority with an
 *     ordinary setsockopt() on a private level, which a cgroup/setsockopt BPF program
 *     intercepts (the kernel never sees it; outside the cgroup it fails with ENOPROTOOPT):
 *
 *         struct ccp_priority_opt p = { .class_code = CCP_PRIO_SCAVENGER };
 *         setsockopt(fd, SOL_CCP, CCP_PRIORITY, &p, sizeof(p));
 *
 * Wire format (every CCP message is little-endian; 24 bytes in all):
 *
 *   offset size field
 *   0      u16  type = 0x20
 *   2      u16  len  = 24 (whole message, header included)
 *   4      u32  sid
 *   8      u32  priority class: 0 primary, 1 scavenger, 2 hybrid
 *   12     u32  flags, 0
 *   16     u64  hybrid threshold in bytes/s, 0 = the agent's configured default
 *
 * Example: sid 3, hybrid above 1,250,000 bytes/s (10 Mbit/s):
 *   20 00 18 00 03 00 00 00 02 00 00 00 00 00 00 00 d0 12 13 00 00 00 00 00
 */
#ifndef CCP_PRIORITY_H
#define CCP_PRIORITY_H

#if defined(__VMLINUX_H__)
/* A BPF program (the eBPF datapath's ccp.h includes this header): vmlinux.h has the types. */
typedef __u8 ccp_prio_u8;
typedef __u32 ccp_prio_u32;
typedef __u64 ccp_prio_u64;
#elif defined(__KERNEL__)
#include <linux/types.h>
typedef u8 ccp_prio_u8;
typedef u32 ccp_prio_u32;
typedef u64 ccp_prio_u64;
#else
#include <stdint.h>
typedef uint8_t ccp_prio_u8;
typedef uint32_t ccp_prio_u32;
typedef uint64_t ccp_prio_u64;
#endif

/* setsockopt level and option name intercepted by the eBPF datapath (its BPF program and
 * daemon take them, and the payload below, from this header). */
#define SOL_CCP 0xCC9
#define CCP_PRIORITY 1

/* Priority classes. */
#define CCP_PRIO_PRIMARY 0
#define CCP_PRIO_SCAVENGER 1
#define CCP_PRIO_HYBRID 2

/* IPC message type and length. Below 256 because portus reads the type as a byte. */
#define CCP_MSG_PRIORITY 0x20
#define CCP_PRIORITY_MSG_LEN 24

/* The setsockopt payload (host byte order, 16 bytes). */
struct ccp_priority_opt {
	ccp_prio_u32 class_code;                     /* CCP_PRIO_* */
	ccp_prio_u32 flags;                          /* 0 */
	ccp_prio_u64 hybrid_threshold_bytes_per_sec; /* 0 = the agent's default */
};

static inline void ccp_prio_put_le(char *at, ccp_prio_u64 v, int bytes)
{
	int i;

	for (i = 0; i < bytes; i++)
		at[i] = (char)(ccp_prio_u8)(v >> (8 * i));
}

/*
 * Write the PRIORITY message for `sid` into `buf`, which must hold
 * CCP_PRIORITY_MSG_LEN bytes. Returns the message length.
 */
static inline int ccp_priority_msg_write(char *buf, ccp_prio_u32 sid,
					 ccp_prio_u32 class_code, ccp_prio_u32 flags,
					 ccp_prio_u64 hybrid_threshold_bytes_per_sec)
{
	ccp_prio_put_le(buf + 0, CCP_MSG_PRIORITY, 2);
	ccp_prio_put_le(buf + 2, CCP_PRIORITY_MSG_LEN, 2);
	ccp_prio_put_le(buf + 4, sid, 4);
	ccp_prio_put_le(buf + 8, class_code, 4);
	ccp_prio_put_le(buf + 12, flags, 4);
	ccp_prio_put_le(buf + 16, hybrid_threshold_bytes_per_sec, 8);
	return CCP_PRIORITY_MSG_LEN;
}

#endif /* CCP_PRIORITY_H */
