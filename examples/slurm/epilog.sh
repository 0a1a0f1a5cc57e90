#!/bin/bash
# Slurm's Epilog: gpufabric-node-health.sh in its epilog mode (settings: see that script).
exec "$(dirname "$(readlink -f "$0")")/gpufabric-node-health.sh" epilog
