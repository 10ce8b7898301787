#!/usr/bin/env bash
# A GPU monitor as training suites run one beside a job: every INTERVAL seconds, one row per GPU
# of index, name, utilization (%), memory used and total (MiB), temperature (C), power (W).
#
# Usage: scripts/env-check/monitor.sh [SAMPLES [INTERVAL]]   (default: forever, every second)
# Under `ncclsim run` it sees every process of the run (the job's other processes included).
set -euo pipefail
samples="${1:-0}"
interval="${2:-1}"
n=0
while [ "$samples" -eq 0 ] || [ "$n" -lt "$samples" ]; do
    [ "$n" -eq 0 ] || sleep "$interval"
    echo "# $(date +%T)"
    nvidia-smi --query-gpu=index,name,utilization.gpu,memory.used,memory.total,temperature.gpu,power.draw \
        --format=csv,noheader,nounits
    n=$((n + 1))
done
