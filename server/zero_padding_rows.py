"""Zero the embedding rows past the tokenizer in a random-weight test model (tied embeddings, so
the output rows too), as they are near zero in a trained checkpoint: a random model otherwise
picks such an id now and then, which vLLM's Rust frontend cannot detokenize (HTTP 500).

    python3 server/zero_padding_rows.py MODEL_DIR
"""

from __future__ import annotations

import sys

import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer


def main(model_dir: str) -> None:
    known = Tokenizer.from_file(f"{model_dir}/tokenizer.json").get_vocab_size(with_added_tokens=True)
    path = f"{model_dir}/model.safetensors"
    weights = load_file(path)
    for name, tensor in weights.items():
        if name.endswith(("embed_tokens.weight", "lm_head.weight")) and tensor.shape[0] > known:
            with torch.no_grad():
                tensor[known:] = 0
            print(f"{name}: rows {known}..{tensor.shape[0] - 1} zeroed")
    save_file(weights, path, metadata={"format": "pt"})


if __name__ == "__main__":
    main(sys.argv[1])
