"""``python -m langchain_qwen_fast.cli``: the same as ``qwen-fast``."""

import sys

from langchain_qwen_fast.cli.main import main

sys.exit(main())
