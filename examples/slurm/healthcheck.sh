#!/bin/bash
# Slurm's HealthCheckProgram: gpufabric-node-health.sh in its healthcheck mode (settings: see that script).
exec "$(dirname "$(readlink -f "$0")")/gpufabric-node-health.sh" healthcheck
