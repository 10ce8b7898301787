#!/bin/bash
# AllReduce per call, ncclsim's libnccl.so.2 against OpenMPI's MPI_Allreduce and the memcpy
# bound, the same C programs as `cargo bench -p benches --bench runtime` run directly and
# interleaved (median of RUNS runs per cell, 3 unless set): quicker than the criterion run when
# only the table is wanted. Needs `cargo build --release` and OpenMPI (benches/install-openmpi.sh).
# Usage: [RUNS=N] [SIZES="8 268435456"] benches/allreduce-sweep.sh [RANKS...]   (default: 8 16)
# On a box shared with other work, run it in a session of its own weighted above the others
# (root): setsid sh -c 'echo -20 > /proc/self/autogroup; exec benches/allreduce-sweep.sh'.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
rel=$repo/target/release
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cp "$rel/libnccl.so" "$dir/libnccl.so.2"
cp "$rel/libcudart12.so" "$dir/libcudart.so.12"
cp "$rel/libncclsim_cuda.so" "$dir/libncclsim_cuda.so"
gcc -O2 -o "$dir/nccl_allreduce" "$repo/benches/c/nccl_allreduce.c" -I"$repo/nccl-shim/include" \
    -L"$dir" -l:libnccl.so.2 -l:libcudart.so.12 -Wl,-rpath,"$dir"
mpicc -O2 -o "$dir/mpi_allreduce" "$repo/benches/c/mpi_allreduce.c"
gcc -O2 -pthread -o "$dir/memcpy_bound" "$repo/benches/c/memcpy_bound.c"
export LD_LIBRARY_PATH=$dir
nccl() {  # ranks iterations bytes: seconds per call
    local n=$1 id=$dir/id-$1-$3
    rm -f "$id"
    for r in $(seq 1 $(($1 - 1))); do
        NCCLSIM_NODE=$((r / 8)) "$dir/nccl_allreduce" "$r" "$n" "$id" "$3" "$2" &
    done
    NCCLSIM_NODE=0 "$dir/nccl_allreduce" 0 "$n" "$id" "$3" "$2"
    wait
}
runs=${RUNS:-3}
median() { sort -g | awk '{ v[NR] = $1 } END { printf "%.9f\n", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "ranks bytes ncclsim_s mpi_s memcpy_s ncclsim/mpi (per call, median of $runs; load: $(cut -d' ' -f1-3 /proc/loadavg))"
ranks=("$@")
[ ${#ranks[@]} -gt 0 ] || ranks=(8 16)
for n in "${ranks[@]}"; do
    for b in ${SIZES:-8 4096 1048576 16777216 268435456}; do
        case $b in
            8 | 4096) it=$((n <= 8 ? 20000 : 5000)) ;;
            1048576) it=200 ;;
            16777216) it=20 ;;
            *) it=2 ;;
        esac
        a=() m=()
        for _ in $(seq "$runs"); do  # interleaved, so both see the same moments of the box
            a+=("$(nccl "$n" "$it" "$b" | tail -1)")
            m+=("$(mpirun --allow-run-as-root --oversubscribe -np "$n" "$dir/mpi_allreduce" "$b" "$it" 2>/dev/null)")
        done
        a=$(printf '%s\n' "${a[@]}" | median)
        m=$(printf '%s\n' "${m[@]}" | median)
        c=$(for _ in $(seq "$runs"); do "$dir/memcpy_bound" "$n" "$b" "$it"; done | median)
        echo "$n $b $a $m $c $(awk -v a="$a" -v m="$m" 'BEGIN { printf "%.2f", a / m }')"
    done
done
