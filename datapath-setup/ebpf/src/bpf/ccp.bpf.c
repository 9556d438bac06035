// SPDX-License-Identifier: GPL-2.0
/*
 * "ccp": a Linux TCP congestion control in eBPF (struct_ops) that hands every ACK to a
 * user-space CCP datapath daemon and applies the daemon's cwnd and pacing rate.
 *
 * Per ACK (cong_control) the flow's measurements go into a ring buffer without waking the
 * reader (the daemon drains it every millisecond; docs/datapaths.md §7.3: a wakeup per ACK costs
 * about 28% of loopback throughput, batching about 5%). Losses, timeouts and state changes
 * wake it at once. The daemon runs libccp per ACK and writes the decisions into `ctl`, an
 * mmapped array, which the next ACK applies (docs/datapaths.md §7.4).
 *
 * While the daemon is silent for longer than `fallback_timeout_ns`, or before the agent has
 * made any decision for a flow, the flow runs the built-in Reno fallback, so that no
 * connection stalls when the daemon or the agent dies.
 *
 * Deviations from ccp-kernel (tcp_ccp.c), whose role this plays:
 *  - No ECN: the flags do not ask for ECN and the ecn_* primitives are 0.
 *  - The fallback is Reno with an immediate cut to ssthresh in CWR/Recovery (no PRR);
 *    ccp-kernel has no fallback at all and freezes the window.
 *  - A cwnd below one MSS is raised to one packet instead of stalling the flow.
 *  - IPv6 flows are controlled but reported with a zero address (CCP's Create carries u32
 *    addresses).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_endian.h>
#include "ccp.h"

char _license[] SEC("license") = "GPL";

/* include/net/tcp.h: not in BTF because they are macros. */
#define TCP_CONG_NON_RESTRICTED 0x1
#define TCP_CA_NAME_MAX 16
#define PAGE_SIZE_BYTES 4096
#define NSEC_PER_MSEC 1000000ULL
#define USEC_PER_SEC 1000000ULL

/* Fixed-point scales, defined once. tp->srtt_us holds the smoothed RTT in µs << 3. */
#define SRTT_SHIFT 3
/* Pacing gain in percent of cwnd/srtt, as tcp_update_pacing_rate (sysctl defaults):
 * 200 in slow start, 120 after. Range of the product: mss (< 2^17) x cwnd (< 2^20)
 * x USEC_PER_SEC (< 2^20) stays below 2^57 before the division by srtt. */
#define PACING_SS_RATIO_PCT 200
#define PACING_CA_RATIO_PCT 120

/* Tunables, set by the daemon before load. */
/* The daemon must have refreshed `daemon_heartbeat_ns` within this time, otherwise every
 * flow runs the fallback. */
const volatile __u64 fallback_timeout_ns = 200 * NSEC_PER_MSEC;

/* Shared with the daemon through the mmapped .bss. */
__u64 daemon_heartbeat_ns;          /* CLOCK_MONOTONIC ns of the daemon's last refresh */
struct ccp_ctl ctl[CCP_CTL_SLOTS];  /* decisions, slot = flow id % CCP_CTL_SLOTS */
__u64 next_flow_id;                 /* flow id allocator */
__u64 events_dropped;               /* ring-buffer records lost because it was full */

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20);
} events SEC(".maps");

/* Per-socket state that outlives a congestion-control switch: the application's priority
 * arrives by setsockopt, possibly before the socket uses "ccp". */
struct ccp_sk {
	__u32 flow_id;   /* the flow id while the socket uses "ccp", else 0 */
	__u32 prio_set;  /* 1 once the application set a priority */
	struct ccp_priority_opt prio;
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct ccp_sk);
} sk_stor SEC(".maps");

/* Per-flow state in icsk_ca_priv, zeroed by the kernel before init. */
struct ccp_flow {
	__u32 flow_id;   /* 0 until init ran (cong_control can run first, docs/datapaths.md §7.2) */
	__u32 ca_state;  /* last TCP_CA_* seen by set_state */
	__u32 was_controlled; /* 1 when the previous ACK applied a daemon decision */
	__u32 reported_ca_state; /* ca_state carried by the last ACK record */
};
_Static_assert(sizeof(struct ccp_flow) <=
		       sizeof(((struct inet_connection_sock *)0)->icsk_ca_priv),
	       "per-flow state must fit icsk_ca_priv");

/* Kernel helpers reused through kfuncs. */
extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;
extern __u32 tcp_reno_ssthresh(struct sock *sk) __ksym;
extern __u32 tcp_reno_undo_cwnd(struct sock *sk) __ksym;

static __always_inline struct tcp_sock *tcp_sk(const struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline struct ccp_flow *ccp_flow(const struct sock *sk)
{
	return (struct ccp_flow *)((struct inet_connection_sock *)sk)->icsk_ca_priv;
}

/* Keep sk_pacing_rate at the kernel's own choice for this cwnd: with cong_control the
 * kernel never updates it, and TSO autosizing reads it even when pacing is off. */
static __always_inline void ccp_pace_from_cwnd(struct sock *sk, struct tcp_sock *tp)
{
	__u64 srtt_us = tp->srtt_us >> SRTT_SHIFT;
	__u64 cwnd = tp->snd_cwnd > tp->packets_out ? tp->snd_cwnd : tp->packets_out;
	__u64 pct = tp->snd_cwnd < tp->snd_ssthresh / 2 ? PACING_SS_RATIO_PCT
							 : PACING_CA_RATIO_PCT;
	__u64 rate;

	if (!srtt_us)
		srtt_us = 1;
	rate = (__u64)tp->mss_cache * cwnd * USEC_PER_SEC / srtt_us;
	rate = rate / 100 * pct;
	if (rate > sk->sk_max_pacing_rate)
		rate = sk->sk_max_pacing_rate;
	sk->sk_pacing_rate = rate;
}

static __always_inline void ccp_fallback(struct sock *sk, struct tcp_sock *tp,
					 struct ccp_flow *f, const struct rate_sample *rs)
{
	__u32 ssthresh = tp->snd_ssthresh;

	if (f->ca_state == TCP_CA_CWR || f->ca_state == TCP_CA_Recovery) {
		if (ssthresh < 2)
			ssthresh = 2;
		if (tp->snd_cwnd > ssthresh)
			tp->snd_cwnd = ssthresh;
	} else if (rs->acked_sacked > 0) {
		tcp_reno_cong_avoid(sk, 0, rs->acked_sacked);
	}
	ccp_pace_from_cwnd(sk, tp);
}

/* Apply the daemon's decision for this flow; false when there is none to apply. */
static __always_inline bool ccp_apply_ctl(struct sock *sk, struct tcp_sock *tp, __u32 id,
					  __u64 now_ns)
{
	struct ccp_ctl *c = &ctl[id & (CCP_CTL_SLOTS - 1)];
	__u64 cwnd_word = c->cwnd_word;
	__u64 rate_word = c->rate_word;
	__u64 cwnd_bytes = cwnd_word >> 32;
	__u64 rate = rate_word >> 32;
	__u32 mss = tp->mss_cache;
	__u32 cwnd_pkts;

	if (daemon_heartbeat_ns + fallback_timeout_ns < now_ns)
		return false;
	if ((__u32)cwnd_word != id || !cwnd_bytes || !mss)
		return false;
	cwnd_pkts = cwnd_bytes / mss;
	if (!cwnd_pkts)
		cwnd_pkts = 1;
	if (cwnd_pkts > tp->snd_cwnd_clamp)
		cwnd_pkts = tp->snd_cwnd_clamp;
	tp->snd_cwnd = cwnd_pkts;

	if ((__u32)rate_word == id && rate) {
		if (rate > sk->sk_max_pacing_rate)
			rate = sk->sk_max_pacing_rate;
		sk->sk_pacing_rate = rate;
		sk->sk_pacing_status = SK_PACING_NEEDED;
	} else {
		ccp_pace_from_cwnd(sk, tp);
	}
	return true;
}

static __always_inline void ccp_fill_tuple(struct ccp_event *e, const struct sock *sk)
{
	if (sk->__sk_common.skc_family == 2 /* AF_INET */) {
		e->src_ip4 = bpf_ntohl(sk->__sk_common.skc_rcv_saddr);
		e->dst_ip4 = bpf_ntohl(sk->__sk_common.skc_daddr);
	}
	e->src_port = sk->__sk_common.skc_num;
	e->dst_port = bpf_ntohs(sk->__sk_common.skc_dport);
}

SEC("struct_ops")
void BPF_PROG(ccp_init, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct ccp_flow *f = ccp_flow(sk);
	struct ccp_event *e;
	struct ccp_sk *st;
	__u32 id;

	/* u32 ids, skipping 0 ("not initialised") when the counter wraps. */
	id = (__u32)(__sync_fetch_and_add(&next_flow_id, 1) % 0xffffffffULL) + 1;
	f->flow_id = id;
	ccp_pace_from_cwnd(sk, tp);

	st = bpf_sk_storage_get(&sk_stor, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (st)
		st->flow_id = id;

	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		__sync_fetch_and_add(&events_dropped, 1);
		return;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->kind = CCP_EV_CREATE;
	e->flow_id = id;
	e->now_ns = bpf_ktime_get_ns();
	ccp_fill_tuple(e, sk);
	if (st && st->prio_set) {
		e->prio_set = 1;
		e->prio = st->prio;
	}
	e->mss_bytes = tp->mss_cache;
	e->snd_cwnd_pkts = tp->snd_cwnd;
	bpf_ringbuf_submit(e, 0);
}

SEC("struct_ops")
void BPF_PROG(ccp_cong_control, struct sock *sk, __u32 ack, int flag,
	      const struct rate_sample *rs)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct ccp_flow *f = ccp_flow(sk);
	__u64 now_ns = bpf_ktime_get_ns();
	struct ccp_event *e;
	__u64 wake;
	bool controlled;

	if (!f->flow_id) {
		ccp_fallback(sk, tp, f, rs);
		return;
	}

	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (e) {
		__builtin_memset(e, 0, sizeof(*e));
		e->kind = CCP_EV_ACK;
		e->flow_id = f->flow_id;
		e->now_ns = now_ns;
		e->mss_bytes = tp->mss_cache;
		e->snd_cwnd_pkts = tp->snd_cwnd;
		e->acked_sacked_pkts = rs->acked_sacked;
		e->delivered_pkts = rs->delivered > 0 ? rs->delivered : 0;
		e->losses_pkts = rs->losses > 0 ? rs->losses : 0;
		e->snd_interval_us = rs->snd_interval_us;
		e->rcv_interval_us = rs->rcv_interval_us;
		e->rtt_us = rs->rtt_us >= 0 && rs->rtt_us < 0x7fffffff ? rs->rtt_us : -1;
		e->packets_out_pkts = tp->packets_out;
		e->sacked_out_pkts = tp->sacked_out;
		e->lost_out_pkts = tp->lost_out;
		e->retrans_out_pkts = tp->retrans_out;
		e->bytes_acked = tp->bytes_acked;
		e->write_seq = tp->write_seq;
		e->snd_una = tp->snd_una;
		e->ca_state = f->ca_state;
		e->in_fallback = !f->was_controlled;
		/* Batch ordinary ACKs; losses and state changes must reach the agent now. */
		wake = e->losses_pkts || f->ca_state != f->reported_ca_state ?
			       BPF_RB_FORCE_WAKEUP :
			       BPF_RB_NO_WAKEUP;
		f->reported_ca_state = f->ca_state;
		bpf_ringbuf_submit(e, wake);
	} else {
		__sync_fetch_and_add(&events_dropped, 1);
	}

	controlled = ccp_apply_ctl(sk, tp, f->flow_id, now_ns);
	if (!controlled)
		ccp_fallback(sk, tp, f, rs);
	f->was_controlled = controlled;
}

SEC("struct_ops")
void BPF_PROG(ccp_set_state, struct sock *sk, __u8 new_state)
{
	struct ccp_flow *f = ccp_flow(sk);
	struct ccp_event *e;

	f->ca_state = new_state;
	if (new_state != TCP_CA_Loss || !f->flow_id)
		return;
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		__sync_fetch_and_add(&events_dropped, 1);
		return;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->kind = CCP_EV_TIMEOUT;
	e->flow_id = f->flow_id;
	e->now_ns = bpf_ktime_get_ns();
	e->ca_state = new_state;
	bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
}

SEC("struct_ops")
__u32 BPF_PROG(ccp_ssthresh, struct sock *sk)
{
	return tcp_reno_ssthresh(sk);
}

SEC("struct_ops")
__u32 BPF_PROG(ccp_undo_cwnd, struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

SEC("struct_ops")
void BPF_PROG(ccp_release, struct sock *sk)
{
	struct ccp_flow *f = ccp_flow(sk);
	struct ccp_event *e;
	struct ccp_sk *st;

	if (!f->flow_id)
		return;
	st = bpf_sk_storage_get(&sk_stor, sk, 0, 0);
	if (st)
		st->flow_id = 0;
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		__sync_fetch_and_add(&events_dropped, 1);
		return;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->kind = CCP_EV_CLOSE;
	e->flow_id = f->flow_id;
	e->now_ns = bpf_ktime_get_ns();
	bpf_ringbuf_submit(e, 0);
}

/* setsockopt(fd, SOL_CCP, CCP_PRIORITY, &struct ccp_priority_opt, len) from unmodified
 * applications in the attached cgroup; the kernel never sees the private level. */
SEC("cgroup/setsockopt")
int ccp_setsockopt(struct bpf_sockopt *ctx)
{
	struct ccp_priority_opt *opt = ctx->optval;
	struct ccp_event *e;
	struct ccp_sk *st;

	if (ctx->level != SOL_CCP || ctx->optname != CCP_PRIORITY) {
		/* Leave other options alone; above a page the kernel must use the caller's
		 * buffer, which it does when optlen is 0 (cgroup sockopt ABI). */
		if (ctx->optlen > PAGE_SIZE_BYTES)
			ctx->optlen = 0;
		return 1;
	}
	/* The verifier needs the bounds check before any read of optval. */
	if ((void *)(opt + 1) > ctx->optval_end)
		return 0;
	if (opt->class_code > 2 || opt->flags != 0)
		return 0;
	if (!ctx->sk)
		return 0;
	st = bpf_sk_storage_get(&sk_stor, ctx->sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!st)
		return 0;
	st->prio = *opt;
	st->prio_set = 1;
	/* Handled here: the kernel skips its own handler and setsockopt returns 0. */
	ctx->optlen = -1;

	/* Before the socket uses "ccp", the CREATE record carries the priority instead. */
	if (!st->flow_id)
		return 1;
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		__sync_fetch_and_add(&events_dropped, 1);
		return 1;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->kind = CCP_EV_PRIORITY;
	e->flow_id = st->flow_id;
	e->now_ns = bpf_ktime_get_ns();
	e->prio_set = 1;
	e->prio = *opt;
	bpf_ringbuf_submit(e, 0);
	return 1;
}

SEC(".struct_ops.link")
struct tcp_congestion_ops ccp = {
	.init = (void *)ccp_init,
	.release = (void *)ccp_release,
	.cong_control = (void *)ccp_cong_control,
	.set_state = (void *)ccp_set_state,
	.ssthresh = (void *)ccp_ssthresh,
	.undo_cwnd = (void *)ccp_undo_cwnd,
	.flags = TCP_CONG_NON_RESTRICTED,
	.name = "ccp",
};
