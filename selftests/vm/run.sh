#!/usr/bin/env bash
# Runs inside the VM (scripts/vm-run): load kiwarp.ko, run the in-VM test
# programs, unload, check that nothing stayed pinned. Prints TAP and exits
# non-zero on any failure. vm-run then scans the kernel log.
# KIWARP_KO: the module to load (default kmod/kiwarp.ko, built for 6.1);
# scripts/kernel --kiwarp builds one per kernel.
set -u
cd "$(dirname "$0")/../.."
fail=0
ko=${KIWARP_KO:-kmod/kiwarp.ko}
echo "# kernel $(uname -r), module $ko"
# what the module needs (libcrc32c up to 6.13; crc32c is built in later)
for dep in $(modinfo -F depends "$ko" | tr , ' '); do
	modprobe "$dep" || { echo "not ok - modprobe $dep (needed by $ko)"; exit 1; }
done
# exact count: fold the per-CPU vmstat deltas first
pins() { echo 1 > /proc/sys/vm/stat_refresh; awk '/^nr_foll_pin_acquired/{a=$2} /^nr_foll_pin_released/{r=$2} END{print a-r}' /proc/vmstat; }
base=$(pins)
insmod "$ko" || { echo "not ok - insmod $ko"; exit 1; }
[ -c /dev/kiwarp ] || { echo "not ok - /dev/kiwarp missing"; exit 1; }
# non-root users may open the device
[ "$(stat -c %a /dev/kiwarp)" = 666 ] || { echo "not ok - /dev/kiwarp mode $(stat -c %a /dev/kiwarp)"; fail=1; }
# KIWARP_VM_TESTS: test commands separated by ';', each a program and its
# arguments (e.g. "selftests/vm/kw_rdma; selftests/vm/kw_peerfuzz --conns 10000").
# run.sh's own arguments are appended to every command.
# The default list ends with bounded smoke runs of the campaigns (make fuzz
# runs them at full size: scripts/fuzz-campaign), KIWARP_SMOKE_SECONDS
# (default 60) each (@SMOKE@ below).
IFS=';' read -ra tests <<< "${KIWARP_VM_TESTS:-selftests/vm/kw_rdma; selftests/vm/kw_hostile; selftests/vm/kw_rnic; selftests/vm/kw_ooo; selftests/vm/kw_security; selftests/vm/kw_es; selftests/vm/kw_eshostile; selftests/vm/fairness.sh; selftests/vm/es_apps.sh; selftests/vm/kw_peerfuzz --seed 1 --conns 2000 --seconds @SMOKE@ --jobs 8; selftests/vmfuzz/kw_fuzz --seed 1 --seconds @SMOKE@ --threads 3; selftests/vmfuzz/kw_esfuzz --seed 1 --seconds @SMOKE@ --threads 3; selftests/vm/faults.sh --smoke --seed 1}"
# @SMOKE@: the smokes' seconds (a token, not ${...}: kernel/vm-check reads
# the default list out of this file up to its first closing brace)
smoke=${KIWARP_SMOKE_SECONDS:-60}
times=	# per program: name and seconds (make check's time budget)
for t in "${tests[@]}"; do
	t=${t//@SMOKE@/$smoke}
	read -ra cmd <<< "$t"
	[ ${#cmd[@]} -gt 0 ] || continue
	t0=$SECONDS
	"${cmd[@]}" "$@" || fail=1
	times+=" ${cmd[0]##*/} $((SECONDS - t0))s"
	# a test that set the stream-page pool and died puts it back here
	p=/sys/module/kiwarp/parameters/tx_pool_kb
	if [ -w "$p" ] && [ "$(cat "$p")" != 0 ]; then
		echo "# ${cmd[0]##*/} left tx_pool_kb at $(cat "$p"): reset to 0"
		echo 0 > "$p"
	fi
done
echo "# vm times:$times"
# unload is refused while a file is open
exec 3</dev/kiwarp
if rmmod kiwarp 2>/dev/null; then echo "not ok - rmmod succeeded with /dev/kiwarp open"; fail=1; fi
exec 3<&-
# skbs still in flight (an orphaned socket retransmitting) keep the module
# busy until TCP lets them go: a few seconds at most here
for i in $(seq 60); do
	rmmod kiwarp 2>/dev/null && break
	sleep 1
done
if lsmod | grep -q '^kiwarp '; then
	rmmod kiwarp; echo "not ok - rmmod kiwarp"; fail=1
elif [ "$i" -gt 1 ]; then
	echo "# rmmod: busy for $((i - 1)) s (skbs in flight)"
fi
after=$(pins)
if [ "$after" != "$base" ]; then
	echo "not ok - pinned pages after unload: $after (before: $base)"; fail=1
fi
exit $fail
