"""For testing chains that use the classifier: sample labels and texts, and a builder of tiny
random-weight Qwen3 models with the real vocabulary and chat template (``test-model`` extra)."""
