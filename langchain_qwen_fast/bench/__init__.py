"""``qwen-fast bench`` and ``qwen-fast bench-scale``: side-by-side latency and throughput
measurements. Needs the ``bench`` extra."""
