#!/bin/bash
# `gpufabric health` for Slurm: drains this node with the check's own reason, and resumes only a node it drained.
#
#   gpufabric-node-health.sh healthcheck|prolog|epilog
#
# healthcheck (slurm.conf HealthCheckProgram): the passive tier; DRAIN (exit 1) drains the node with the first line
#   of `gpufabric health` as its Reason; HEALTHY (exit 0) resumes the node when, and only when, its drain reason
#   starts "gpufabric:" (this script drained it). A node drained by anyone else (a reason of their own) is left as
#   it is, faulty or healthy.
# prolog (slurm.conf Prolog): the same check before each job; on DRAIN it drains the node and exits 1, so that
#   Slurm requeues the job (Slurm may then write its own "Prolog error" reason: the first line is in the slurmd log).
# epilog (slurm.conf Epilog): the quick tier after each job (GEMM, HBM bandwidth, a memory pattern: about 20 s on 4
#   GPUs); on DRAIN it drains the node and exits 0 (the job is over; the drain keeps the next one off the node).
#
# "could not tell" (exit 6: a reading the check needs could not be had) drains too unless GPUFABRIC_ON_UNKNOWN=keep:
# a node whose GPUs cannot be read is not called healthy. Any other exit of gpufabric (2: no profile, a bad option)
# is said on stderr and changes nothing.
#
# Settings (environment, or the file $GPUFABRIC_HEALTH_CONF, default /etc/gpufabric/health.env, sourced first):
#   GPUFABRIC             the command (default: gpufabric)
#   GPUFABRIC_HEALTH_ARGS its arguments, e.g. "--accepted /var/lib/gpufabric/gpufabric-results.json"
#   GPUFABRIC_EPILOG_ARGS the epilog's tier (default: --quick)
#   GPUFABRIC_ON_UNKNOWN  drain (default) or keep
#   GPUFABRIC_HEALTH_JSON / GPUFABRIC_HEALTH_PROM  files for --json and --prom (default: none)
#   SCONTROL, SINFO       the Slurm commands (default: scontrol, sinfo)
set -u
mode=${1:-healthcheck}
conf=${GPUFABRIC_HEALTH_CONF:-/etc/gpufabric/health.env}
# shellcheck disable=SC1090
[ -r "$conf" ] && . "$conf"
gpufabric=${GPUFABRIC:-gpufabric}
scontrol=${SCONTROL:-scontrol}
sinfo=${SINFO:-sinfo}
node=${SLURMD_NODENAME:-$(hostname -s)}
prefix="gpufabric:"

args=(health)
[ "$mode" = epilog ] && read -r -a tier <<< "${GPUFABRIC_EPILOG_ARGS:---quick}" && args+=("${tier[@]}")
read -r -a extra <<< "${GPUFABRIC_HEALTH_ARGS:-}"
args+=("${extra[@]}")
[ -n "${GPUFABRIC_HEALTH_JSON:-}" ] && args+=(--json "$GPUFABRIC_HEALTH_JSON")
[ -n "${GPUFABRIC_HEALTH_PROM:-}" ] && args+=(--prom "$GPUFABRIC_HEALTH_PROM")

read -r -a command <<< "$gpufabric"
# the verdict is the first line of standard output (a warning on stderr must not become the reason)
errors=$(mktemp 2>/dev/null || echo /dev/null)
output=$("${command[@]}" "${args[@]}" 2>"$errors")
rc=$?
line=$(printf '%s\n' "$output" | head -n 1)
[ "$errors" != /dev/null ] && { [ -n "$line" ] || line=$(head -n 1 "$errors"); rm -f "$errors"; }

# the node's state and drain reason, as slurmctld has them ("drained|gpufabric: DRAIN GPU1 ...")
state_reason=$("$sinfo" --noheader --Node --nodes="$node" --format='%T|%E' 2>/dev/null | head -n 1)
state=${state_reason%%|*}
reason=${state_reason#*|}
drained=no
case $state in *drain*|*DRAIN*) drained=yes ;; esac

drain() {
    if [ "$drained" = yes ] && [ "${reason#"$prefix"}" = "$reason" ]; then
        echo "gpufabric-node-health: $node is drained by someone else ($reason): left as it is; $1" >&2
        return 0
    fi
    [ "$drained" = yes ] && [ "$reason" = "$1" ] && return 0
    "$scontrol" update NodeName="$node" State=DRAIN Reason="$1"
}

case $rc in
    0)
        if [ "$drained" = yes ] && [ "${reason#"$prefix"}" != "$reason" ]; then
            "$scontrol" update NodeName="$node" State=RESUME
        fi
        exit 0 ;;
    1)
        drain "$line"
        [ "$mode" = prolog ] && exit 1
        exit 0 ;;
    6)
        if [ "${GPUFABRIC_ON_UNKNOWN:-drain}" = drain ]; then
            drain "$line"
            [ "$mode" = prolog ] && exit 1
        else
            echo "gpufabric-node-health: $line (GPUFABRIC_ON_UNKNOWN=keep: not drained)" >&2
        fi
        exit 0 ;;
    *)
        echo "gpufabric-node-health: gpufabric health exited $rc, nothing changed: $line" >&2
        exit 0 ;;
esac
