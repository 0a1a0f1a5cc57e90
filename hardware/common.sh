# Sourced by the record-*.sh scripts, run on a GPU machine from the repository's root:
# NVLink multicast off (it can take a shared host's GPUs out of service), the carried wheels installed into
# /tmp/site, a scratch directory to run in (so the installed wheel, not the checkout, is what runs), and `step`.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
repo=$(pwd)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 1
export PYTHONPATH=/tmp/site
work=$(mktemp -d) && cd "$work" || exit 1
step() { echo; echo "### $*"; "$@"; echo "### exit $?"; }
# timed NAME COMMAND...: runs it, its output in $timed_dir/NAME.out and .err (timed_dir: default here), and appends
# "NAME rc=RC wall_s=SECONDS first line" to $timed_dir/timings.txt
timed() {
  local name=$1 dir=${timed_dir:-.}; shift
  local start end rc ms
  start=$(date +%s%N)
  "$@" > "$dir/$name.out" 2> "$dir/$name.err"
  rc=$?
  end=$(date +%s%N)
  ms=$(( (end - start) / 1000000 ))
  printf '%s rc=%s wall_s=%d.%03d %s\n' "$name" "$rc" $((ms / 1000)) $((ms % 1000)) "$(head -n1 "$dir/$name.out")" \
    | tee -a "$dir/timings.txt"
}
# run_key PUB: an Ed25519 key of this run only, run-key.pem here and its public half at PUB (it travels with the
# report, for `gpufabric verify --key`)
run_key() {
  python3 - "$1" <<'KEY'
import sys

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

key = Ed25519PrivateKey.generate()
open("run-key.pem", "wb").write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                  serialization.NoEncryption()))
open(sys.argv[1], "wb").write(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                            serialization.PublicFormat.SubjectPublicKeyInfo))
KEY
}
