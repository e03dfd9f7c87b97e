#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# Fault tests (issue 6, item 3). Runs inside the VM as root, with kiwarp.ko
# already loaded (by selftests/vm/run.sh):
#
#   selftests/vm/faults.sh [--smoke|--long] [--profile NAME] [kw_faults args]
#
# Builds two network namespaces joined by a veth pair (10.77.0.1/24 in
# kwf-a, 10.77.0.2/24 in kwf-b, MTU 1500), puts netem on both ends, runs
# kw_faults with its client in kwf-a and its server in kwf-b, then checks
# that the faults really happened: qdisc drops, and in the namespaces' TCP
# counters retransmissions, out-of-order queueing and D-SACKs (duplicates).
# Profiles (netem arguments, both directions):
#   lossy (default)  loss 2%, duplicate 1%, reorder 25% gap 5, delay 2ms 1ms
#   heavy            loss 5%, duplicate 3%, reorder 40% gap 3, delay 5ms 3ms
# No "corrupt": netem corrupts a header byte, and veth marks what it
# delivers CHECKSUM_UNNECESSARY, so TCP would accept a flipped sequence
# number or RST bit: a broken stream that no TCP guarantees against.
#   clean            no netem (baseline)
# Prints TAP; the last line is "# N passed, N failed".
set -u
cd "$(dirname "$0")/../.."

mode=--smoke
profile=lossy
args=()
while [ $# -gt 0 ]; do
	case $1 in
	--smoke|--long) mode=$1 ;;
	--profile) profile=$2; shift ;;
	*) args+=("$1") ;;
	esac
	shift
done
case $profile in
lossy) netem="loss 2% duplicate 1% reorder 25% gap 5 delay 2ms 1ms" ;;
heavy) netem="loss 5% duplicate 3% reorder 40% gap 3 delay 5ms 3ms" ;;
clean) netem= ;;
*) echo "faults.sh: unknown profile $profile" >&2; exit 2 ;;
esac

A=kwf-a B=kwf-b
bail() { echo "not ok 1 - faults: $*"; echo "# 0 passed, 1 failed"; exit 1; }
cleanup() { tools/netpair down kwf; }

[ -c /dev/kiwarp ] || bail "/dev/kiwarp missing (load kiwarp.ko first)"
trap cleanup EXIT
tools/netpair up kwf 10.77.0 1500 || bail "veth pair between namespaces"
if [ -n "$netem" ]; then
	tools/netpair netem kwf ab $netem || bail "netem"  # one word per argument
fi
echo "# faults: profile $profile: ${netem:-no netem}"
# markers on every connection with conn & 2; with the patched kernel's
# hook (patches/) their Writes and Read Responses are placed as segments
# arrive, and the traffic phase must show some placed out of order
hooks=$(cat /sys/module/kiwarp/parameters/tcp_hooks 2>/dev/null || echo 0)
args+=(--markers)
[ "$hooks" = 1 ] && [ -n "$netem" ] && args+=(--expect-ooo)
echo "# faults: TCP hooks $hooks"

# TCP counters of a namespace: "name value" for the names given
tcpstat() {
	ip netns exec "$1" cat /proc/net/snmp /proc/net/netstat | awk -v want="$2" '
		BEGIN { n = split(want, w, " "); for (i = 1; i <= n; i++) sel[w[i]] = 1 }
		$1 == prev { for (i = 2; i <= NF; i++) if ((p ":" hdr[i]) in sel) v[p ":" hdr[i]] += $i; next }
		{ prev = $1; p = substr($1, 1, length($1) - 1); for (i = 2; i <= NF; i++) hdr[i] = $i }
		END { for (k in sel) printf "%s %d\n", k, v[k] }'
}
qdrops() { tc -s -n "$1" qdisc show dev "$2" | awk '/dropped/ { gsub(",", ""); for (i = 1; i <= NF; i++) if ($i == "(dropped") print $(i + 1) }' | head -1; }

# kw_faults prints TAP 1..5; we add one test: hold back its plan and
# summary line and print our own at the end. A bash loop, not awk: mawk
# reads a pipe in blocks, and a hang would then show nothing at all.
t0=$(date +%s)
sumf=$(mktemp)
selftests/vm/kw_faults --ns-a $A --ns-b $B --addr 10.77.0.2 $mode "${args[@]}" |
	while IFS= read -r l; do
		case $l in
		1..[0-9]*) ;;
		"# "*" passed, "*" failed") set -- $l; echo "$2 $4" > "$sumf" ;;
		*) printf '%s\n' "$l" ;;
		esac
	done
rc=${PIPESTATUS[0]}
summary=$(cat "$sumf"); rm -f "$sumf"
read -r passed failed <<<"${summary:-0 1}"
[ "$rc" = 0 ] || [ "$failed" != 0 ] || failed=1

keys="Tcp:RetransSegs TcpExt:TCPOFOQueue TcpExt:TCPDSACKRecv TcpExt:TCPDSACKOldSent"
declare -A tot=()
for ns in $A $B; do
	while read -r k v; do tot[$k]=$(( ${tot[$k]:-0} + v )); done < <(tcpstat $ns "$keys")
done
line="retrans ${tot[Tcp:RetransSegs]:-0}, ofo ${tot[TcpExt:TCPOFOQueue]:-0}, dsack sent ${tot[TcpExt:TCPDSACKOldSent]:-0} recv ${tot[TcpExt:TCPDSACKRecv]:-0}"
ok=1
if [ -n "$netem" ]; then
	da=$(qdrops $A kwf0) db=$(qdrops $B kwf1)
	line="qdisc drops ${da:-?}/${db:-?}, $line"
	# the faults must really have happened, in both directions
	[ "${da:-0}" -gt 0 ] && [ "${db:-0}" -gt 0 ] || ok=0
	[ "${tot[Tcp:RetransSegs]:-0}" -gt 0 ] || ok=0
	[ "${tot[TcpExt:TCPOFOQueue]:-0}" -gt 0 ] || ok=0
	[ "${tot[TcpExt:TCPDSACKOldSent]:-0}" -gt 0 ] || ok=0
fi
if [ $ok = 1 ]; then
	echo "ok 6 - netem $profile applied: $line"; passed=$((passed + 1))
else
	echo "not ok 6 - netem $profile not effective: $line"; failed=$((failed + 1))
fi
echo "1..6"
echo "# faults.sh $mode: $(( $(date +%s) - t0 )) s"
echo "# $passed passed, $failed failed"
[ "$failed" = 0 ]
