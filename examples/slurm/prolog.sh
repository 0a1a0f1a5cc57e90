#!/bin/bash
# Slurm's Prolog: gpufabric-node-health.sh in its prolog mode (settings: see that script).
exec "$(dirname "$(readlink -f "$0")")/gpufabric-node-health.sh" prolog
