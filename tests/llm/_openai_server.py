"""Start llama-cpp-python's own OpenAI-compatible server (``python -m llama_cpp.server``) with llama.cpp's
weight-repacking buffers off, as ``GGUFSource`` loads the model: on a processor that announces AMX while the
virtual machine does not let a process use it, those buffers fault at the first evaluation (docs/llm.md).
The server has no option for it, so this wraps llama.cpp's default model parameters before it starts."""
from __future__ import annotations

import os
import sys
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from llama_cpp import llama_cpp
from llama_cpp.server.__main__ import main

_defaults = llama_cpp.llama_model_default_params


def _without_extra_buffers() -> Any:
    params = _defaults()
    params.use_extra_bufts = False
    return params


llama_cpp.llama_model_default_params = _without_extra_buffers

if __name__ == "__main__":
    sys.exit(main())  # type: ignore[no-untyped-call]
