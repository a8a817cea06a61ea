#!/usr/bin/env bash
# Check that a mosquitto configured with cross/mosquitto-edgecfl.conf carries edgecfl-sized
# messages: starts it on a spare port, publishes (QoS 1) payloads of the sizes edgecfl sends and
# one packet over the limit, and reports what a subscriber received.
#
#   cross/mosquitto-check.sh [PORT]        (default port 18883; needs mosquitto + mosquitto-clients)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PORT="${1:-18883}"
for b in mosquitto mosquitto_pub mosquitto_sub; do
    command -v "$b" >/dev/null || { echo "missing $b: apt-get install mosquitto mosquitto-clients" >&2; exit 1; }
done
work="$(mktemp -d)"
broker_pid=""
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() { [[ -n "$broker_pid" ]] && kill "$broker_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
sed "s/^listener 1883 0.0.0.0/listener $PORT 127.0.0.1/" "$ROOT/cross/mosquitto-edgecfl.conf" >"$work/m.conf"
mosquitto -c "$work/m.conf" -v >"$work/broker.log" 2>&1 &
broker_pid=$!
for _ in $(seq 50); do mosquitto_pub -p "$PORT" -t edgecfl/check/ping -n 2>/dev/null && break; sleep 0.1; done
echo "$(mosquitto -h 2>&1 | head -1 | sed 's/^mosquitto //') on 127.0.0.1:$PORT with cross/mosquitto-edgecfl.conf"

fail=0
# name bytes expect(received|refused)
check() {
    local name="$1" bytes="$2" expect="$3"
    head -c "$bytes" /dev/urandom >"$work/payload"
    mosquitto_sub -p "$PORT" -q 1 -t "edgecfl/check/$name" -C 1 -W 10 >"$work/got" 2>/dev/null &
    local sub=$!
    sleep 0.5
    local rc=0
    mosquitto_pub -p "$PORT" -q 1 -t "edgecfl/check/$name" -f "$work/payload" 2>"$work/pub.err" || rc=$?
    wait "$sub" || true
    local got; got=$(stat -c %s "$work/got")
    # mosquitto_sub appends a newline to each message.
    local received=$(( got > 0 ? got - 1 : 0 ))
    local verdict
    if [[ "$expect" == received ]]; then
        if cmp -s -n "$bytes" "$work/payload" "$work/got" && [[ $received -eq $bytes ]]; then verdict=ok; else verdict=FAIL; fail=1; fi
    else
        if [[ $received -eq 0 ]]; then verdict=ok; else verdict=FAIL; fail=1; fi
    fi
    printf '%-28s %9d bytes  publisher rc=%d  subscriber got %9d bytes  expected %-8s %s\n' \
        "$name" "$bytes" "$rc" "$received" "$expect" "$verdict"
}
check lenet5-f32-update 182000 received          # ~178 KB: LeNet-5 parameters in f32 plus envelope
check max-payload 4194304 received                # protocol::MAX_PAYLOAD
check over-max-packet $((4198400 + 8192)) refused # > max_packet_size: publisher disconnected
echo "broker log on the oversized packet:"
grep -i "oversize" "$work/broker.log" | tail -3 | sed 's/^/    /'
exit $fail
