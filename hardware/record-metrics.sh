#!/usr/bin/env bash
# Run on an NVLink machine: the NVLink traffic suite with --gpu-metrics-port, scraped from outside every
# 0.25 s (as Prometheus would) while it runs. Each scrape is appended to OUT/scrapes.txt after a line
# "# scrape UNIX_TIME", so the tests can see the link counters move during the training, not after it; give a
# profile whose nvlink_traffic.steps keep the training longer than a few scrapes (50 steps take 0.25 s on H200).
#
#   hardware/record-metrics.sh PROFILE OUTDIR      (needs prometheus-client among the carried wheels)
set -u -o pipefail
profile=$1
out=$2
port=9464
source "$(dirname "$0")/common.sh"
python3 -m pytest --gpu-profile "$profile" -p no:cacheprovider -rA -k "nvlink or test_gpu_count" \
  --gpu-metrics-port "$port" --gpu-report-dir "$PWD/reports" > "$out/log.txt" 2>&1 &
pytest_pid=$!
python3 - "$pytest_pid" "$port" "$out/scrapes.txt" <<'PY'
import os, sys, time, urllib.request
pid, port, path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
served, failures = False, 0
with open(path, "a") as scrapes:
    while failures < 20 or not served:  # until the server has been gone 5 s (or pytest is gone)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
            scrapes.write(f"# scrape {time.time():.3f}\n{text}")
            served, failures = True, 0
        except OSError:
            failures += 1  # not serving yet, or already stopped
        time.sleep(0.25)
PY
wait "$pytest_pid"
echo "### pytest exit $?" >> "$out/log.txt"
cp reports/gpufabric-results.json "$out/results-live.json"
cp reports/nvlink-traffic.json "$out/"
tail -5 "$out/log.txt"
grep -c "^# scrape" "$out/scrapes.txt"
