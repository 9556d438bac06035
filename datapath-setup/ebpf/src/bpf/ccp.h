/* SPDX-License-Identifier: GPL-2.0 OR MIT OR Apache-2.0 */
/*
 * Types shared by the BPF congestion control (ccp.bpf.c) and its daemon (Rust, through
 * bindgen at build time): the ring-buffer record and the control slot. Every field is
 * host byte order unless its name says otherwise; the unit is in the name.
 */
#ifndef CCP_EBPF_H
#define CCP_EBPF_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* Control slots in the mmapped array; a flow uses slot flow_id % CCP_CTL_SLOTS. */
#define CCP_CTL_SLOTS 8192

/* The private setsockopt level and option (SOL_CCP, CCP_PRIORITY) an application uses to
 * set its priority, and its payload struct ccp_priority_opt: the applications' header. */
#include "ccp_priority.h"

/* Record kinds. */
enum ccp_event_kind {
	CCP_EV_CREATE = 1,   /* init: a flow started using "ccp" */
	CCP_EV_ACK = 2,      /* cong_control: one ACK's measurements */
	CCP_EV_TIMEOUT = 3,  /* set_state(TCP_CA_Loss): RTO fired */
	CCP_EV_CLOSE = 4,    /* release: the flow left "ccp" */
	CCP_EV_PRIORITY = 5, /* setsockopt(SOL_CCP, CCP_PRIORITY) on a socket */
};

/* One ring-buffer record; `kind` says which fields are meaningful. */
struct ccp_event {
	__u32 kind;      /* enum ccp_event_kind */
	__u32 flow_id;   /* BPF-assigned flow id, never 0 */
	__u64 now_ns;    /* bpf_ktime_get_ns (CLOCK_MONOTONIC) */
	/* CREATE and PRIORITY */
	__u32 src_ip4;   /* local IPv4 address, host order (0 for IPv6) */
	__u32 dst_ip4;   /* remote IPv4 address, host order (0 for IPv6) */
	__u16 src_port;  /* local port, host order */
	__u16 dst_port;  /* remote port, host order */
	__u32 prio_set;  /* 1 when the prio_* fields carry an application's choice */
	struct ccp_priority_opt prio;
	/* CREATE and ACK */
	__u32 mss_bytes;          /* tp->mss_cache */
	__u32 snd_cwnd_pkts;      /* tp->snd_cwnd */
	/* ACK: from struct rate_sample */
	__u32 acked_sacked_pkts;  /* rs->acked_sacked */
	__u32 delivered_pkts;     /* rs->delivered (interval), 0 when the sample is invalid */
	__u32 losses_pkts;        /* rs->losses */
	__u32 snd_interval_us;    /* rs->snd_interval_us */
	__u32 rcv_interval_us;    /* rs->rcv_interval_us */
	__s32 rtt_us;             /* rs->rtt_us, -1 when there is no sample */
	/* ACK: from struct tcp_sock */
	__u32 packets_out_pkts;   /* tp->packets_out */
	__u32 sacked_out_pkts;    /* tp->sacked_out */
	__u32 lost_out_pkts;      /* tp->lost_out */
	__u32 retrans_out_pkts;   /* tp->retrans_out */
	__u64 bytes_acked;        /* tp->bytes_acked, cumulative */
	__u32 write_seq;          /* tp->write_seq */
	__u32 snd_una;            /* tp->snd_una */
	__u32 ca_state;           /* icsk_ca_state (TCP_CA_*) */
	__u32 in_fallback;        /* 1 when the flow's previous ACK ran the BPF fallback */
};

/*
 * One control slot, written by the daemon with plain 8-byte stores and read by
 * cong_control. Each word carries the flow id so that a torn update or a slot reused by
 * another flow is never applied to the wrong flow (x86-64 and arm64 8-byte aligned
 * stores are single-copy atomic).
 */
struct ccp_ctl {
	__u64 cwnd_word; /* low 32: flow id; high 32: cwnd in bytes (0 = no decision) */
	__u64 rate_word; /* low 32: flow id; high 32: pacing rate in bytes/s (0 = none) */
};

#endif /* CCP_EBPF_H */
