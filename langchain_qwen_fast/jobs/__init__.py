"""Dataset jobs: classify a whole file (``qwen-fast classify``) or a Ray dataset, row by row,
with every input column kept and the classification's columns added (:mod:`.columns`)."""
