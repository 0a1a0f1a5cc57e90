"""Fleet acceptance: many servers, one verdict.

Each node runs the acceptance itself, started by the scheduler the site already runs (``srun``, a Kubernetes
Indexed Job): ``launch`` says where its results go and which fleet run they belong to. ``report`` then reads the
nodes' results JSON files only (never the plugin or NVML), and writes one fleet verdict: every node's verdict, the
nodes that never reported, inventory drift, and outliers among the passing nodes (median and MAD per measurement),
as JSON, HTML and JUnit.
"""
