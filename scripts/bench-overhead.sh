#!/usr/bin/env bash
# Benchmark of BENCHMARKS.md "MQTT overhead": the coordinator's per-round time with N lightweight
# simulated clients (tests/sim_fleet.rs: real MQTT connections and protocol, no training) over
# mosquitto on loopback, so every second of a round is overhead. Uploads in f32 and f16.
# Usage: [PROFILE=debug|release] [ROUNDS=5] [ENCODINGS="f32 f16"] [BROKER=mosquitto|embedded]
#        [TABLE_ONLY=1] scripts/bench-overhead.sh [N...]
#        BROKER=embedded: the coordinator's own broker (rumqttd) instead of mosquitto; its results
#        go to bench-results/overhead/embedded-n<N>-<enc> and its RSS includes the broker's.
#        (default: 100 500; TABLE_ONLY=1 prints the table of earlier results without running)
# Results: bench-results/overhead/n<N>-<enc>/{summary.json,rounds.csv,fleet.json,coordinator.time},
# and a table on stdout: round times, traffic, the coordinator's peak RSS (/usr/bin/time -v), and
# the message count check (every job the coordinator published reached a simulated client, every
# answer a client published was accepted, no phase timed out).
# The echo clients all send the same signature, so FedClust finds one cluster: every round the
# coordinator sends all N clients the new model for evaluation, the worst case for traffic.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${PROFILE:-release}
rounds=${ROUNDS:-5}
broker=${BROKER:-mosquitto}
read -r -a encs <<< "${ENCODINGS:-f32 f16}"
case "$broker" in mosquitto) tag= ;; embedded) tag=embedded- ;; *) echo "BROKER must be mosquitto or embedded" >&2; exit 2 ;; esac
ns=("$@"); [ ${#ns[@]} -gt 0 ] || ns=(100 500)
flag=(); [ "$profile" = release ] && flag=(--release)
[ -n "${TABLE_ONLY:-}" ] || {
cargo build -q "${flag[@]}" -p coordinator -p edgecfl-tests --bins
bin=target/$profile
mosq=$(command -v mosquitto || echo /usr/sbin/mosquitto)
for n in "${ns[@]}"; do
  for enc in "${encs[@]}"; do
    out=bench-results/overhead/${tag}n$n-$enc
    rm -rf "$out"; mkdir -p "$out"
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    if [ "$broker" = mosquitto ]; then
      printf 'listener %s 127.0.0.1\nallow_anonymous true\npersistence false\nmax_packet_size 4198400\nmax_inflight_messages 100\nmax_queued_messages 100000\nmax_connections -1\n' "$port" > "$out/mosquitto.conf"
      "$mosq" -c "$out/mosquitto.conf" > "$out/mosquitto.log" 2>&1 &
      mpid=$!
      sleep 0.5
      where=(--broker "mqtt://127.0.0.1:$port")
    else
      mpid=
      where=(--port "$port" --listen 127.0.0.1)
    fi
    echo "== N=$n upload=$enc broker=$broker (port $port)"
    /usr/bin/time -v -o "$out/coordinator.time" "$bin/coordinator" serve "${where[@]}" --prefix edgecfl/bench \
      --clients "$n" --min-clients "$n" --rounds "$rounds" --frac 0.1 --eval-every 1 \
      --upload "$enc" --phase-timeout 600 --data shared/data/fmnist-subset --out "$out" \
      > "$out/coordinator.log" 2>&1 &
    cpid=$!
    [ "$broker" = mosquitto ] || python3 -c "import socket,sys,time
for _ in range(200):
    try: socket.create_connection(('127.0.0.1', $port)).close(); sys.exit(0)
    except OSError: time.sleep(0.05)
sys.exit('the embedded broker did not start')"
    "$bin/sim-fleet" "$port" "$n" edgecfl/bench > "$out/fleet.json" 2> "$out/fleet.log" &
    fpid=$!
    wait "$cpid" || { echo "coordinator failed, see $out/coordinator.log"; kill $fpid $mpid; exit 1; }
    wait "$fpid" || true
    [ -z "$mpid" ] || { kill "$mpid"; wait "$mpid" 2>/dev/null || true; }
    rm -f "$out"/*.svg "$out"/checkpoint.json   # identical echo clients: nothing to look at; the checkpoint is 14 MB at N=1000
  done
done
}
python3 - "$profile" "$tag" "${encs[*]}" "${ns[@]}" <<'PY'
import csv, json, sys, statistics
profile, tag, encs, ns = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4:]
print(f"| clients | upload | round 0: signatures + clustering (s) | training round, median (s) | MB through the broker per round, down / up | per message: signature, update (raw floats) | coordinator peak RSS | messages down / answers up: coordinator, fleet; timeouts |  ({profile} build, {'embedded broker' if tag else 'mosquitto'})")
print("|---|---|---|---|---|---|---|---|")
lost = []
for n in ns:
    for enc in encs:
        d = f"bench-results/overhead/{tag}n{n}-{enc}"
        s = json.load(open(f"{d}/summary.json"))
        rows = list(csv.DictReader(open(f"{d}/rounds.csv")))
        secs = [float(r["seconds"]) for r in rows]
        w = s["wire_bytes"]; nc = s["n_clients"]; r = len(rows)
        # `down` also holds round 0's signature jobs (one model per client).
        down = (w["down"] - nc * w["down"] / (nc + sum(int(x["sampled"]) for x in rows) + nc * r)) / r
        up = (w["update_up"] + w["evaluation_up"]) / r
        per_update = w["update_up"] / max(w["updates"], 1)
        rss, msgs = "-", "-"
        try:
            for line in open(f"{d}/coordinator.time"):
                if "Maximum resident set size" in line:
                    rss = f"{int(line.split(':')[1]) / 1024:.0f} MiB"
            f = json.loads(open(f"{d}/fleet.json").read().strip().splitlines()[-1])
            # The fleet counts the final Finish, which the coordinator does not count as a job.
            got = f["commands"] - f["finishes"]
            msgs = (f"{w['messages_down']} / {w['answers_up']}, {got} / {f['answers']}; "
                    f"{s['phase_timeouts']}")
            if (got, f["answers"], s["phase_timeouts"]) != (w["messages_down"], w["answers_up"], 0):
                lost.append(d)
        except (OSError, KeyError, ValueError, IndexError):
            pass   # results of an earlier version of this script
        print(f"| {nc} | {enc} | {s['wall_seconds'] - sum(secs):.2f} | {statistics.median(secs):.2f} | "
              f"{down / 1e6:.1f} / {up / 1e6:.2f} | {w['signature_up'] / nc:.0f} B ({850 * 4}), "
              f"{per_update:.0f} B ({44426 * 4}) | {rss} | {msgs} |")
if lost:
    sys.exit("messages lost or timed out in: " + ", ".join(lost))
PY
