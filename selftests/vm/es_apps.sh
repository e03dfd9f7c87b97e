#!/usr/bin/env bash
# SPDX-License-Identifier: (GPL-2.0 OR MIT)
#
# Unmodified programs nobody here wrote, under kiwarp-run (issue 9, part 2):
# iperf3, sockperf, redis-server + redis-benchmark/redis-cli, nginx + curl
# and wrk, on loopback inside the VM. Each runs three ways:
#   plain        no preload: the reference result;
#   passthrough  kiwarp-run without --iwarp: the same result, and no
#                connection switched (the host-wide counters do not move);
#   iwarp        kiwarp-run --iwarp-ports P on both ends: the same result,
#                and /sys/class/misc/kiwarp/es/ shows the connections
#                switched and at least the payload's bytes sent over iWARP.
# Runs as root in the VM (selftests/vm/run.sh, kiwarp.ko loaded). Prints
# TAP and "# N passed, N failed". A program that is not installed is a
# failure, not a skip: scripts/deps installs them all.
# KIWARP_ES_APPS_MODES: the modes to run (default all three; the other
# kernels' suites run only iwarp, as the first two do not involve the
# kernel module).
set -u
cd "$(dirname "$0")/../.."
KR=$PWD/tools/kiwarp-run
ST=/sys/class/misc/kiwarp/es
W=$(mktemp -d /tmp/es_apps.XXXXXX)
chmod 755 "$W"		# nginx's workers run as nobody
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$W"' EXIT
ip link set lo up
n=0 passed=0 failed=0
MODES=${KIWARP_ES_APPS_MODES:-plain passthrough iwarp}

ok() { n=$((n + 1)); passed=$((passed + 1)); echo "ok $n - $*"; }
nok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $*"; }
cnt() { cat "$ST/$1" 2>/dev/null || echo -1; }
snap() { s_sw=$(cnt switched); s_fail=$(cnt failed); s_tx=$(cnt tx_bytes); s_rx=$(cnt rx_bytes); }
# after a run: the counters' deltas in d_sw d_fail d_tx d_rx (before judging)
delta() {
	d_sw=$(( $(cnt switched) - s_sw )); d_fail=$(( $(cnt failed) - s_fail ))
	d_tx=$(( $(cnt tx_bytes) - s_tx )); d_rx=$(( $(cnt rx_bytes) - s_rx ))
}
# how a program is started in mode $1 for port $2
wrap() {
	case $1 in
	plain) ;;
	passthrough) echo "$KR" ;;
	iwarp) echo "$KR --iwarp-ports $2" ;;
	esac
}
# The counters' verdict for a run in mode $1: at least $2 switches (both
# ends of each connection count) and $3 payload bytes each way over
# iWARP; none at all without --iwarp.
judge_counters() {
	local mode=$1 conns=$2 bytes=$3

	if [ "$mode" = iwarp ]; then
		[ $d_sw -ge "$conns" ] && [ $d_fail -eq 0 ] &&
		[ $d_tx -ge "$bytes" ] && [ $d_rx -ge "$bytes" ]
	else
		[ $d_sw -eq 0 ] && [ $d_fail -eq 0 ] && [ $d_tx -eq 0 ]
	fi
}
counters() { echo "switched +$d_sw, failed +$d_fail, iWARP bytes +$d_tx sent +$d_rx received"; }
# whether the program started by `timeout` (pid $1) has the preload mapped,
# as it must in every mode but plain
preload_ok() {
	local c mapped=no

	c=$(pgrep -P "$1" | head -n1)
	[ -n "$c" ] && grep -q libkiwarp-es.so /proc/$c/maps 2>/dev/null && mapped=yes
	[ "$mapped" = "$([ "$2" = plain ] && echo no || echo yes)" ]
}
waitport() {
	local i
	for i in $(seq 300); do
		ss -Hltn "sport = :$1" | grep -q . && return 0
		sleep 0.1
	done
	return 1
}

for prog in iperf3 sockperf redis-server redis-benchmark redis-cli nginx curl wrk python3; do
	command -v $prog >/dev/null || { nok "$prog not installed (scripts/deps)"; }
done
[ -r $ST/switched ] || nok "$ST missing"
echo "# $(dpkg-query -W -f '${Package} ${Version}, ' iperf3 sockperf redis-server nginx-light wrk curl 2>&1)"

# ---------------------------------------------------------------- iperf3
# -n 4M each way (-R: the server sends); the JSON's byte counts must be
# exactly the request, as without the preload.
port=5201
for mode in $MODES; do
	for dir in "" -R; do
		port=$((port + 1))
		w=$(wrap $mode $port)
		snap
		timeout 120 $w iperf3 -s -1 -p $port > $W/is.log 2>&1 &
		spid=$!
		waitport $port || { nok "iperf3 $mode $dir: server not listening"; kill $spid; wait $spid; continue; }
		preload_ok $spid $mode; pre=$?
		timeout 120 $w iperf3 -c 127.0.0.1 -p $port -n 4M $dir --json > $W/ic.json 2> $W/ic.err
		crc=$?
		wait $spid
		src=$?
		got=$(python3 -c 'import json,sys; e=json.load(open(sys.argv[1]))["end"]; print(e["sum_sent"]["bytes"], e["sum_received"]["bytes"])' $W/ic.json 2>/dev/null)
		lbl="iperf3 $mode ${dir:-(client sends)}: -n 4M"
		# iperf3 -n is not exact, with or without the preload: the
		# sender may go a block or more past it (seen on a slow guest),
		# and the receiver reports what it had read when the test was
		# said to end. The counters show that the bytes crossed iWARP.
		sent=${got% *} rcvd=${got#* }
		delta
		if [ $crc = 0 ] && [ $src = 0 ] && [ $pre = 0 ] &&
		   [ "${sent:-0}" -ge 4194304 ] && [ "${sent:-0}" -le 5242880 ] &&
		   [ "${rcvd:-0}" -gt 0 ] && [ "${rcvd:-0}" -le "$sent" ] &&
		   judge_counters $mode 4 4194304; then
			ok "$lbl: $sent bytes sent, $rcvd counted by the receiver; $(counters)"
		else
			nok "$lbl: client $crc, server $src, preload $pre, bytes '$got'; $(counters)"
			tail -n 3 $W/ic.err $W/is.log | sed 's/^/#   /'
		fi
	done
done

# -------------------------------------------------------------- sockperf
# ping-pong: every reply arrives, in order, none dropped or duplicated;
# throughput: the sender's count reached the server (the counters).
port=11110
for mode in $MODES; do
	port=$((port + 1))
	w=$(wrap $mode $port)
	snap
	timeout 120 $w sockperf sr --tcp -i 127.0.0.1 -p $port > $W/ss.log 2>&1 &
	spid=$!
	waitport $port || { nok "sockperf $mode: server not listening"; kill $spid; wait $spid; continue; }
	preload_ok $spid $mode; pre=$?
	timeout 60 $w sockperf pp --tcp -i 127.0.0.1 -p $port -t 2 -m 64 > $W/pp.log 2>&1
	prc=$?
	timeout 60 $w sockperf tp --tcp -i 127.0.0.1 -p $port -t 2 -m 1400 > $W/tp.log 2>&1
	trc=$?
	kill $spid 2>/dev/null; wait $spid 2>/dev/null
	rx=$(sed -n 's/.*ReceivedMessages=\([0-9]*\).*/\1/p' $W/pp.log | head -n1)
	clean=$(grep -c '# dropped messages = 0; # duplicated messages = 0; # out-of-order messages = 0' $W/pp.log)
	sent=$(sed -n 's/.*Total of \([0-9]*\) messages sent.*/\1/p' $W/tp.log | head -n1)
	delta
	if [ $prc = 0 ] && [ $trc = 0 ] && [ $pre = 0 ] && [ "${rx:-0}" -gt 0 ] && [ "$clean" -ge 1 ] &&
	   [ "${sent:-0}" -gt 0 ] && judge_counters $mode 4 $((sent * 1400)); then
		ok "sockperf $mode: ping-pong $rx replies (none dropped, duplicated or out of order), throughput $sent x 1400 B; $(counters)"
	else
		nok "sockperf $mode: preload $pre, pp $prc ($rx replies, clean $clean), tp $trc ($sent sent); $(counters)"
		tail -n 3 $W/pp.log $W/tp.log $W/ss.log | sed 's/^/#   /'
	fi
done

# ----------------------------------------------------------------- redis
# redis-benchmark's SET/GET complete; a 1.3 MB value stored with redis-cli
# comes back byte for byte.
head -c 1000000 /dev/urandom | base64 -w0 > $W/val
port=6390
for mode in $MODES; do
	port=$((port + 1))
	w=$(wrap $mode $port)
	snap
	timeout 180 $w redis-server --port $port --bind 127.0.0.1 --save '' \
		--appendonly no --dir $W > $W/rs.log 2>&1 &
	spid=$!
	waitport $port || { nok "redis $mode: server not listening"; kill $spid; wait $spid; continue; }
	preload_ok $spid $mode; pre=$?
	timeout 120 $w redis-benchmark -p $port -n 1000 -c 10 -q -t set,get > $W/rb.log 2>&1
	brc=$?
	timeout 30 $w redis-cli -p $port -x set big < $W/val > $W/set.out 2>&1
	timeout 30 $w redis-cli -p $port --raw get big 2>&1 | head -c -1 > $W/got
	kill $spid 2>/dev/null; wait $spid 2>/dev/null
	res=$(tr '\r' '\n' < $W/rb.log | grep -E '^(SET|GET): [0-9.]+ requests per second' | cut -d: -f1 | tr '\n' ' ')
	delta
	if [ $brc = 0 ] && [ $pre = 0 ] && [ "$res" = "SET GET " ] && grep -q OK $W/set.out &&
	   cmp -s $W/val $W/got && judge_counters $mode 40 1000000; then
		ok "redis $mode: redis-benchmark SET and GET x1000 over 10 connections, a 1333336-byte value back intact; $(counters)"
	else
		nok "redis $mode: preload $pre, benchmark $brc ('$res'), set '$(head -c 40 $W/set.out)', value $(cmp $W/val $W/got 2>&1 | head -n1); $(counters)"
		tr '\r' '\n' < $W/rb.log | tail -n 3 | sed 's/^/#   /'
		tail -n 3 $W/rs.log | sed 's/^/#   /'
	fi
done

# ----------------------------------------------------------------- nginx
# A 3 MB static file (sendfile on: the splice path into the socket) fetched
# by curl compares equal; wrk's requests all answer 200.
mkdir -p $W/www $W/ng
head -c 3000000 /dev/urandom > $W/www/f.bin
echo hello > $W/www/small.txt
chmod -R a+rX $W/www
port=8080
for mode in $MODES; do
	port=$((port + 1))
	w=$(wrap $mode $port)
	cat > $W/ng.conf <<-EOF
	daemon off; master_process on; worker_processes 2; pid $W/ng.pid;
	error_log $W/ng/error.log;
	events { worker_connections 64; }
	http {
		access_log off; sendfile on; tcp_nopush on;
		keepalive_requests 1000000;	# no reconnects within wrk's run
		client_body_temp_path $W/ng; proxy_temp_path $W/ng;
		fastcgi_temp_path $W/ng; uwsgi_temp_path $W/ng; scgi_temp_path $W/ng;
		server { listen 127.0.0.1:$port; root $W/www; }
	}
	EOF
	: > $W/ng/error.log
	snap
	timeout 180 $w nginx -c $W/ng.conf -e $W/ng/error.log > $W/n.log 2>&1 &
	spid=$!
	waitport $port || { nok "nginx $mode: server not listening"; kill $spid; wait $spid; continue; }
	preload_ok $spid $mode; pre=$?
	rm -f $W/got.bin
	timeout 60 $w curl -sS -o $W/got.bin http://127.0.0.1:$port/f.bin > $W/curl.log 2>&1
	crc=$?
	timeout 60 $w wrk -t1 -c4 -d2 http://127.0.0.1:$port/small.txt > $W/wrk.log 2>&1
	wrc=$?
	kill $spid 2>/dev/null; wait $spid 2>/dev/null
	reqs=$(sed -n 's/^ *\([0-9]*\) requests in.*/\1/p' $W/wrk.log)
	bad=$(grep -c 'Non-2xx\|Socket errors' $W/wrk.log)
	delta
	if [ $crc = 0 ] && [ $pre = 0 ] && cmp -s $W/www/f.bin $W/got.bin && [ $wrc = 0 ] &&
	   [ "${reqs:-0}" -gt 0 ] && [ "$bad" = 0 ] &&
	   judge_counters $mode 10 3000000; then
		ok "nginx $mode: curl fetched the 3000000-byte file intact (sendfile), wrk $reqs requests all 200; $(counters)"
	else
		nok "nginx $mode: preload $pre, curl $crc ($(cmp $W/www/f.bin $W/got.bin 2>&1 | head -n1)), wrk $wrc ($reqs requests, $bad error lines); $(counters)"
		cat $W/curl.log $W/wrk.log | tail -n 8 | sed 's/^/#   /'
		tail -n 3 $W/ng/error.log | sed 's/^/#   /'
	fi
done

# examples/: stream (plain TCP) switched by kiwarp-run --iwarp, and
# iowrite, the same program with riomap()/riowrite(): its 16 MiB go by
# one-sided writes, so the stream counters see only the few bytes of its
# greeting and messages.
# KIWARP_ES_APPS_EXAMPLES=0 skips them (make check's debug tier).
EX=$PWD/examples
examples="stream iowrite"
[ "${KIWARP_ES_APPS_EXAMPLES:-1}" = 0 ] && examples=
for prog in $examples; do
	port=$((port + 1))
	snap
	timeout 60 "$KR" --iwarp --iomap 1 "$EX/$prog" -l $port > $W/ex.s 2>&1 &
	spid=$!
	waitport $port || { nok "examples/$prog: server not listening"; kill $spid; wait $spid; continue; }
	timeout 60 "$KR" --iwarp --iomap 1 "$EX/$prog" 127.0.0.1 $port > $W/ex.c 2>&1
	crc=$?
	wait $spid
	src=$?
	delta
	# stream: the 16 MiB as stream bytes; iowrite: under 1 KiB of them
	if [ $prog = stream ]; then want="$d_tx -ge 16777216"; else want="$d_tx -lt 1024"; fi
	if [ $crc = 0 ] && [ $src = 0 ] && grep -q ': ok' $W/ex.c && grep -q ': ok' $W/ex.s &&
	   [ $d_sw = 2 ] && [ $d_fail = 0 ] && [ $want ]; then
		ok "examples/$prog under kiwarp-run --iwarp: 16 x 1 MiB checked by the server; $(counters)"
	else
		nok "examples/$prog: client $crc, server $src; $(counters)"
		cat $W/ex.c $W/ex.s | tail -n 6 | sed 's/^/#   /'
	fi
done

echo "1..$n"
echo "# es_apps ($MODES): $SECONDS s"
echo "# $passed passed, $failed failed"
[ $failed = 0 ]
