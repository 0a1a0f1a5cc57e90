"""Work that touches CUDA or NCCL: standalone scripts run in child processes by runner.run_workload."""
