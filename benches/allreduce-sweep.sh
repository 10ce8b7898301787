#!/bin/bash
# AllReduce per call, ncclsim's libnccl.so.2 against OpenMPI's MPI_Allreduce and the memcpy
# bound, the same C programs as `cargo bench -p benches --bench runtime` run directly and
# interleaved (median of 3 runs per cell): quicker than the criterion run when only the table
# is wanted. Needs `cargo build --release` and OpenMPI (benches/install-openmpi.sh).
# Usage: benches/allreduce-sweep.sh [RANKS...]   (default: 8 16)
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
median() { sort -g | sed -n 2p; }
echo "ranks bytes ncclsim_s mpi_s memcpy_s (per call; load: $(cut -d' ' -f1-3 /proc/loadavg))"
ranks=("$@")
[ ${#ranks[@]} -gt 0 ] || ranks=(8 16)
for n in "${ranks[@]}"; do
    for b in 8 4096 1048576 16777216 268435456; do
        case $b in
            8 | 4096) it=$((n <= 8 ? 20000 : 5000)) ;;
            1048576) it=200 ;;
            16777216) it=20 ;;
            *) it=2 ;;
        esac
        a=$(for _ in 1 2 3; do nccl "$n" "$it" "$b" | tail -1; done | median)
        m=$(for _ in 1 2 3; do
            mpirun --allow-run-as-root --oversubscribe -np "$n" "$dir/mpi_allreduce" "$b" "$it" 2>/dev/null
        done | median)
        c=$(for _ in 1 2 3; do "$dir/memcpy_bound" "$n" "$b" "$it"; done | median)
        echo "$n $b $a $m $c"
    done
done
