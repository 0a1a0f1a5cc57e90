"""What the machine is: the typed model and the sources that fill it (live NVML, tool text, bundles)."""
