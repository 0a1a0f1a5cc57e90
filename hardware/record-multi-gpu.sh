#!/usr/bin/env bash
# On a machine of several NVLink-joined GPUs (issue 31's live halves), from the repository's root:
#
#   hardware/record-multi-gpu.sh OUTDIR
#
# 1. benchmarks/watchdog_cost.py: 1 and 200 trivial tests under this machine's profile (gpufabric profile init),
#    with and without the plugin, three rounds -> OUTDIR/watchdog_cost.json;
# 2. nccl-tests built here from the source carried in .nccl-tests/ (against the NCCL torch ships), then
#    benchmarks/nccl_compare.py on every GPU -> OUTDIR/nccl_compare.json and its table;
# 3. hardware/record-platform.sh -> OUTDIR/platform.tar.gz.
# Each step writes its file as it ends: a call cut short keeps what was done.
set -u -o pipefail
out=$1
repo=$(pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 1
export PYTHONPATH=/tmp/site
gpus=$(nvidia-smi -L | grep -c '^GPU ')
python3 -m pytest_gpufabric profile init -o /tmp/machine.yaml > "$out/profile-init.log" 2>&1
echo "### watchdog_cost"
timeout 240 python3 benchmarks/watchdog_cost.py --profile /tmp/machine.yaml --rounds 3 --tests 200 \
  --out "$out/watchdog_cost.json" > "$out/watchdog_cost.log" 2>&1
tail -12 "$out/watchdog_cost.log"
echo "### nccl-tests build"
nccl=$(python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])')
# NCCL_HOME as the Makefile wants it: include/ and lib/libnccl.so (the wheel ships only libnccl.so.2)
mkdir -p /tmp/nccl-home/lib && ln -sfn "$nccl"/include /tmp/nccl-home/include \
  && ln -sf "$nccl"/lib/libnccl.so.2 /tmp/nccl-home/lib/libnccl.so
cp -r .nccl-tests /tmp/nccl-tests
(cd /tmp/nccl-tests && timeout 300 make -j 32 MPI=0 CUDA_HOME=/usr/local/cuda NCCL_HOME=/tmp/nccl-home \
   > "$out/nccl-tests-build.log" 2>&1)
echo "build exit $?"
export LD_LIBRARY_PATH="$nccl/lib:${LD_LIBRARY_PATH:-}"
echo "### nccl_compare"
timeout 300 python3 benchmarks/nccl_compare.py --gpus "$gpus" --runs 2 --nccl-tests /tmp/nccl-tests/build/all_reduce_perf \
  --json "$out/nccl_compare.json" > "$out/nccl_compare.log" 2>&1
tail -12 "$out/nccl_compare.log"
echo "### platform"
cd "$repo" && timeout 200 bash hardware/record-platform.sh "$out" > "$out/platform.log" 2>&1
echo "platform exit $?"
