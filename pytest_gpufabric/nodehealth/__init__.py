"""`gpufabric health`: the check a scheduler runs on a node between jobs.

- record.py: health.json, the one record of every GPU's health counters and the kernel's Xid lines, read live
  (NVML, the kernel log) or from a bundle, typed;
- passive.py: the findings of a record against the node's baseline (baseline.py: its profile, its accepted boards);
- quick.py: `--quick`, a few seconds of the acceptance's workloads on every GPU at once;
- finding.py: a finding, and the verdict (HEALTHY 0, DRAIN 1, UNKNOWN 6) from them;
- output.py: the first line (the drain reason), the JSON document, the node_exporter textfile;
- command.py: the subcommand cli/health.py registers.

The passive tier imports no torch: it runs in a second or two between jobs.
"""
