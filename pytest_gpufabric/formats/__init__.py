"""The formats of what other tools print, and of the recordings this plugin writes.

One module per tool (``topo`` and ``nvlink`` for nvidia-smi's text, ``nvidia_smi_q`` for its XML,
``nccl_tests``, ``perftest``) and ``recordings`` for the plugin's own files. Every parser is a pure function
of text: it reads no files and runs no tools, so the live run, a replayed bundle and a support ticket's paste
are read by the same code. It reads what a person pastes (shell prompts and command lines before the output,
banners a script printed between blocks, tabs turned into spaces) and raises ``ValueError`` naming the line
and what was expected on anything else. Below fabric/ and workloads/: nothing here imports either's machinery.
"""
