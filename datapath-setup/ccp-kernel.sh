#!/bin/sh
# Bring up ccp-kernel (the CCP Linux kernel module) beside ccp-agent, on hosts that can
# load kernel modules. Where modules are impossible (CONFIG_MODULES unset, locked-down or
# signed-module-only kernels), use the eBPF datapath instead: datapath-setup/ebpf.
#
#   ccp-kernel.sh fetch DIR     clone ccp-kernel (with libccp) and pick the branch for this kernel
#   ccp-kernel.sh build DIR     build ccp-cong.ko against /lib/modules/$(uname -r)/build (netlink IPC)
#   ccp-kernel.sh load DIR      insmod, and allow unprivileged sockets to choose "ccp"
#   ccp-kernel.sh unload        rmmod, and remove "ccp" from the allowed list
#   ccp-kernel.sh agent [ARGS]  the matching agent command line (netlink)
#
# Facts this relies on (docs/datapaths.md §6, §1.4, §2.2):
# * Branch main needs Linux >= 6.10 (new cong_control signature); 4.19-6.9 need the branch
#   4.19-6.9-compat; older kernels are unsupported.
# * Only the netlink IPC builds; the character device (IPC=1) does not compile.
# * The module file is ccp-cong.ko; the congestion control it registers is "ccp".
# * From Linux 6.15 kbuild ignores EXTRA_CFLAGS, which ccp-kernel's Makefile uses; on those
#   kernels this script asks the Makefile for its EXTRA_CFLAGS and hands them to kbuild as
#   KCFLAGS, which adds to the flags. (ccflags-y on make's command line would replace the
#   Makefile's flags on every kernel, its version defines included.)
# * ccp-kernel names every flow "reno" in its Create, so the agent chooses the algorithm by
#   its policy file (4-tuple rules) or --default, never by name.
# * Netlink group 22 needs CAP_NET_ADMIN: run the agent as root. One agent per host.
# * Start the agent before loading the module (the module sends Ready once, at load).
set -eu

REPO=https://github.com/ccp-project/ccp-kernel

kver() { uname -r | awk -F. '{ printf "%d %d\n", $1, $2 }'; }

# The flags ccp-kernel's Makefile computes for itself (its EXTRA_CFLAGS), without building.
module_cflags() {
	printf 'print-module-cflags:\n\t@echo $(EXTRA_CFLAGS)\n' |
		make -s --no-print-directory -C "$1" -f Makefile -f - IPC=0 \
			KERNEL_VERSION_MAJOR="$2" KERNEL_VERSION_MINOR="$3" print-module-cflags
}

need_modules() {
	if [ ! -e /proc/modules ]; then
		echo "this kernel cannot load modules (CONFIG_MODULES unset): use datapath-setup/ebpf" >&2
		exit 1
	fi
}

branch_for_kernel() {
	set -- $(kver)
	if [ "$1" -gt 6 ] || { [ "$1" -eq 6 ] && [ "$2" -ge 10 ]; }; then
		echo main
	elif [ "$1" -gt 4 ] || { [ "$1" -eq 4 ] && [ "$2" -ge 19 ]; }; then
		echo 4.19-6.9-compat
	else
		echo "Linux $(uname -r) is older than 4.19: ccp-kernel does not support it" >&2
		exit 1
	fi
}

cmd=${1:-}
case "$cmd" in
fetch)
	dir=${2:?usage: ccp-kernel.sh fetch DIR}
	b=$(branch_for_kernel)
	git clone --recursive --branch "$b" "$REPO" "$dir"
	echo "ccp-kernel branch $b in $dir"
	;;
build)
	need_modules
	dir=${2:?usage: ccp-kernel.sh build DIR}
	kdir=/lib/modules/$(uname -r)/build
	[ -d "$kdir" ] || { echo "no kernel headers at $kdir" >&2; exit 1; }
	set -- $(kver)
	if [ "$1" -gt 6 ] || { [ "$1" -eq 6 ] && [ "$2" -ge 15 ]; }; then
		# kbuild >= 6.15 drops EXTRA_CFLAGS: add the Makefile's own flags back.
		make -C "$dir" IPC=0 KERNEL_VERSION_MAJOR="$1" KERNEL_VERSION_MINOR="$2" \
			KCFLAGS="$(module_cflags "$dir" "$1" "$2")"
	else
		make -C "$dir" IPC=0 KERNEL_VERSION_MAJOR="$1" KERNEL_VERSION_MINOR="$2"
	fi
	ls -l "$dir"/ccp-cong.ko
	;;
load)
	need_modules
	dir=${2:?usage: ccp-kernel.sh load DIR}
	if grep -qw ccp /proc/sys/net/ipv4/tcp_available_congestion_control; then
		echo "a congestion control named ccp is already registered (ccp-ebpf running?)" >&2
		exit 1
	fi
	insmod "$dir/ccp-cong.ko"
	allowed=$(sysctl -n net.ipv4.tcp_allowed_congestion_control)
	sysctl -q -w net.ipv4.tcp_allowed_congestion_control="$allowed ccp"
	echo "loaded; sockets choose it with setsockopt(TCP_CONGESTION, \"ccp\") or iperf3 -C ccp"
	;;
unload)
	allowed=$(sysctl -n net.ipv4.tcp_allowed_congestion_control | tr ' ' '\n' | grep -vx ccp | tr '\n' ' ')
	sysctl -q -w net.ipv4.tcp_allowed_congestion_control="$allowed" || true
	rmmod ccp-cong
	;;
agent)
	shift
	echo "ccp-agent --ipc netlink --default cubic --policy POLICY.toml $*"
	echo "(ccp-kernel sends \"reno\" for every flow: per-flow choice comes from the policy's 4-tuple rules)"
	;;
*)
	sed -n '2,14p' "$0"
	exit 1
	;;
esac
