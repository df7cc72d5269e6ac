"""``qwen-fast train``: labelled data files, training tasks and the trainer (head or SFT
fine-tuning with transformers and peft). Needs the ``train`` extra to train; reading data files
needs nothing beyond the client."""
