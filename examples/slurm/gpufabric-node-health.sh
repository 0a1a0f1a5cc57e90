#!/bin/bash
# `gpufabric health` for Slurm: drains this node with the check's own reason, and resumes only a node it drained.
#
#   gpufabric-node-health.sh healthcheck|prolog|epilog
#
# healthcheck (slurm.conf HealthCheckProgram): the passive tier; DRAIN (exit 1) drains the node with the check's
#   scheduler reason ("gpufabric GPU3 xid79: Xid 79 fell off the bus, serial ...; reset": the board and the fault in
#   the 20 characters sinfo -R shows); HEALTHY (exit 0) resumes the node when, and only when, its drain reason starts
#   "gpufabric " (this script drained it). A node drained or down for anyone else's reason is left as it is.
# prolog (slurm.conf Prolog): the same check before each job; on a drain it drains the node and exits 1, so that
#   Slurm requeues the job (Slurm may then write its own "Prolog error" reason: the first line is in the slurmd log).
# epilog (slurm.conf Epilog): the quick tier after each job (GEMM, HBM bandwidth, a memory pattern: about 20 s on 4
#   GPUs); on a drain it drains the node and exits 0 (the job is over; the drain keeps the next one off the node).
#
# Drains are remembered by gpufabric health itself ($GPUFABRIC_STATE_DIR/health-state.json): a quick-tier drain is
# kept by the passive runs after it, a reset fault until a reboot. An operator lifts one with
#   gpufabric health --clear CHECK|all --by NAME
# (a plain scontrol resume is drained again by the next check while the state holds the drain).
#
# Never silent: "could not tell" (exit 6, also "could not finish in N s") drains unless GPUFABRIC_ON_UNKNOWN=keep;
# any other exit (2 a usage error, 127 the command not found, 137 killed) drains with the reason
# "gpufabric node rc127: ..." unless GPUFABRIC_ON_ERROR=ignore. Where gpufabric itself wrote no .prom for the run,
# this script writes one saying the exit status.
#
# Nodes in a state of their own are left alone, as NHC leaves them: DOWN, MAINT, REBOOT_*, POWER*, FAIL, and a
# drain with someone else's reason.
#
# Settings (environment, or the file $GPUFABRIC_HEALTH_CONF, default /etc/gpufabric/health.env, sourced first):
#   GPUFABRIC             the command (default: gpufabric)
#   GPUFABRIC_HEALTH_ARGS its arguments, e.g. "--accepted /var/lib/gpufabric/gpufabric-results.json"
#   GPUFABRIC_EPILOG_ARGS the epilog's tier (default: --quick --deadline 120)
#   GPUFABRIC_ON_UNKNOWN  drain (default) or keep
#   GPUFABRIC_ON_ERROR    drain (default) or ignore: any exit but 0, 1 and 6
#   GPUFABRIC_HEALTH_JSON a file for --json
#   GPUFABRIC_HEALTH_PROM a folder (node_exporter's textfile folder: gpufabric-health-passive.prom and
#                         gpufabric-health-quick.prom, one per tier) or a file, for --prom
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
prefix="gpufabric "
legacy_prefix="gpufabric:"  # the reasons of this script's earlier versions

args=(health --reason)
tier=passive
if [ "$mode" = epilog ]; then
    read -r -a tier_args <<< "${GPUFABRIC_EPILOG_ARGS:---quick --deadline 120}"
    args+=("${tier_args[@]}")
    case " ${tier_args[*]} " in *" --quick "*) tier=quick ;; esac
fi
read -r -a extra <<< "${GPUFABRIC_HEALTH_ARGS:-}"
args+=("${extra[@]}")
[ -n "${GPUFABRIC_HEALTH_JSON:-}" ] && args+=(--json "$GPUFABRIC_HEALTH_JSON")
[ -n "${GPUFABRIC_HEALTH_PROM:-}" ] && args+=(--prom "$GPUFABRIC_HEALTH_PROM")

read -r -a command <<< "$gpufabric"
started=$(mktemp 2>/dev/null || echo "")
# the reason is the first line of standard output (a warning on stderr must not become the reason)
errors=$(mktemp 2>/dev/null || echo /dev/null)
output=$("${command[@]}" "${args[@]}" 2>"$errors")
rc=$?
line=$(printf '%s\n' "$output" | head -n 1)
if [ "$errors" != /dev/null ]; then
    error_line=$(head -n 1 "$errors" | tr -d '"\\`'"'")
    rm -f "$errors"
else
    error_line=""
fi

# the node's state and drain reason, as slurmctld has them ("idle+drain|gpufabric GPU1 rrpend: ...")
state_reason=$("$sinfo" --noheader --Node --nodes="$node" --format='%T|%E' 2>/dev/null | head -n 1)
state=${state_reason%%|*}
reason=${state_reason#*|}
ours() { [ "${1#"$prefix"}" != "$1" ] || [ "${1#"$legacy_prefix"}" != "$1" ]; }
drained=no
case $state in *drain*|*DRAIN*) drained=yes ;; esac
own_state=no
case $state in *down*|*DOWN*|*maint*|*MAINT*|*reboot*|*REBOOT*|*power*|*POWER*|*fail*|*FAIL*) own_state=yes ;; esac

drain() {
    if [ "$own_state" = yes ] && ! ours "$reason"; then
        echo "gpufabric-node-health: $node is $state (${reason:-no reason}): left as it is; $1" >&2
        return 0
    fi
    if [ "$drained" = yes ] && ! ours "$reason"; then
        echo "gpufabric-node-health: $node is drained by someone else ($reason): left as it is; $1" >&2
        return 0
    fi
    [ "$drained" = yes ] && [ "$reason" = "$1" ] && return 0
    "$scontrol" update NodeName="$node" State=DRAIN Reason="$1"
}

# gpufabric wrote no .prom this run (not found, killed, a bad option): rewrite the tier's last one with every check
# "could not tell" (2), so that its series stay the same; or, where there is none yet, one saying the exit status
error_prom() {
    local target=${GPUFABRIC_HEALTH_PROM:-}
    [ -n "$target" ] || return 0
    [ -d "$target" ] && target="$target/gpufabric-health-$tier.prom"
    [ -n "$started" ] && [ "$target" -nt "$started" ] && return 0
    local tmp checks
    tmp=$(mktemp "$(dirname "$target")/.gpufabric-health.XXXXXX") || return 0
    if [ -s "$target" ]; then
        checks=$(grep -c '^gpufabric_health_\(node_\)\?check_status{' "$target")
        sed -e 's/^\(gpufabric_health_\(node_\)\?check_status{[^}]*}\) .*/\1 2/' \
            -e 's/^\(gpufabric_health_exit_code{[^}]*}\) .*/\1 '"$rc"'/' \
            -e 's/^\(gpufabric_health_verdict{[^}]*verdict="UNKNOWN"}\) .*/\1 1/' \
            -e 's/^\(gpufabric_health_verdict{[^}]*verdict="\(HEALTHY\|DRAIN\)"}\) .*/\1 0/' \
            -e 's/^\(gpufabric_health_checks{[^}]*outcome="judged"}\) .*/\1 0/' \
            -e 's/^\(gpufabric_health_checks{[^}]*outcome="not_readable"}\) .*/\1 '"$checks"'/' \
            -e 's/^\(gpufabric_health_findings{[^}]*severity="unknown"}\) .*/\1 1/' \
            -e 's/^\(gpufabric_health_findings{[^}]*severity="\(drain\|warn\)"}\) .*/\1 0/' \
            -e 's/^\(gpufabric_health_\(drain_remedy\|seconds\){[^}]*}\) .*/\1 0/' \
            -e 's/^\(gpufabric_health_last_run_timestamp_seconds{[^}]*}\) .*/\1 '"$(date +%s)"'/' \
            "$target" > "$tmp"
    else
        {
            echo "# HELP gpufabric_health_exit_code Exit status of the last check: 0 healthy, 1 drain, 6 could not tell."
            echo "# TYPE gpufabric_health_exit_code gauge"
            echo "gpufabric_health_exit_code{tier=\"$tier\"} $rc"
            echo "# HELP gpufabric_health_last_run_timestamp_seconds When the last check ended (Unix time)."
            echo "# TYPE gpufabric_health_last_run_timestamp_seconds gauge"
            echo "gpufabric_health_last_run_timestamp_seconds{tier=\"$tier\"} $(date +%s)"
        } > "$tmp"
    fi
    chmod 644 "$tmp" && mv -f "$tmp" "$target"
}

case $rc in
    0)
        if [ "$drained" = yes ] && ours "$reason"; then
            "$scontrol" update NodeName="$node" State=RESUME
        fi
        status=0 ;;
    1)
        drain "$line"
        status=0; [ "$mode" = prolog ] && status=1 ;;
    6)
        status=0
        if [ "${GPUFABRIC_ON_UNKNOWN:-drain}" = drain ]; then
            drain "$line"
            [ "$mode" = prolog ] && status=1
        else
            echo "gpufabric-node-health: $line (GPUFABRIC_ON_UNKNOWN=keep: not drained)" >&2
        fi ;;
    *)
        case $rc in
            2) what="usage error" ;;
            126) what="command not executable"; error_line=${command[0]} ;;
            127) what="command not found"; error_line=${command[0]} ;;
            124|137|143) what="killed" ;;
            *) what="failed" ;;
        esac
        why="${prefix}node rc$rc: gpufabric health exited $rc ($what): ${error_line:-$line}"
        why=${why:0:128}
        error_prom
        status=0
        if [ "${GPUFABRIC_ON_ERROR:-drain}" = drain ]; then
            drain "$why"
            [ "$mode" = prolog ] && status=1
        else
            echo "gpufabric-node-health: $why (GPUFABRIC_ON_ERROR=ignore: not drained)" >&2
        fi ;;
esac
[ -n "$started" ] && rm -f "$started"
exit $status
