"""Local runs: a pipeline, start to end, on the emulator, as ``stepcrawl run`` / ``demo`` run it.

The local cloud (the CDK stack synthesized and deployed into the emulator, its functions
running), the runner that starts a run and waits for it, the live progress view, the page
states an incremental task keeps between runs, and the Prometheus view ``stepcrawl serve``
exposes.
"""
