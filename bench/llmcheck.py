"""Exploration throughput of ``forewarn llmcheck``: states per second, model calls per state.

What it does
------------
For two token sources on CPU:

* an **n-gram** model (order 3) trained on a synthetic corpus of 3,000 sentences over a
  few hundred words (generated from a seeded grammar, nothing downloaded);
* a **tiny transformer**: GPT-2 architecture, 2 layers, 32 dimensions, 2 heads, a
  word-level tokenizer of about 60 words, both built locally from a config (random
  weights: the distribution is close to uniform, so the frontier is wide);

it explores the α-k-bounded DTMC after a start text and reports: states, expanded
prefixes, model calls (prefixes sent to the model), batches (forward passes), calls per
expanded prefix (target: exactly 1.0), prefixes per batch (target: ≥ 8 when the
frontier is that wide), explored states per second, the share of time in the model, and
Storm's check time for ``P=? [F "gender_bias>0"]``. The transformer runs with batch
sizes 1 and 16 to show what batching buys. Nothing is asserted.

Run: ``python bench/llmcheck.py [--quick] [--json FILE]``
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from typing import Any

import _common as C

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from forewarn.guard.llmcheck import ExploreSettings, NgramSource, check_explored, explore, parse_query
from forewarn.guard.llmcheck.quantify import parse_quantifications
from forewarn.guard.llmcheck.sources.base import TokenSource

SUBJECTS = ["the player", "the coach", "the agent", "she", "he", "the team", "my friend", "the doctor",
            "the engineer", "a student", "the manager", "the crowd"]
VERBS = ["won", "lost", "said", "ran", "saw", "liked", "built", "fixed", "read", "wrote", "found", "moved",
         "deleted", "opened", "closed", "checked", "sent", "took"]
OBJECTS = ["the game", "a goal", "the file", "the report", "the car", "the door", "a letter", "the code",
           "the ball", "the plan", "the server", "a book", "the data", "the road", "her bag", "his phone"]
TAILS = ["", " today", " again", " quickly", " at home", " in the morning", " and left", " and smiled",
         " because it was late", " with care", " before the match", " after lunch"]


def synthetic_corpus(n: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        s = f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}{rng.choice(TAILS)}"
        if rng.random() < 0.3:
            s += f" and {rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}"
        lines.append(s.capitalize() + ".")
    return "\n".join(lines)


def tiny_transformer(seed: int = 0) -> Any:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    from forewarn.guard.llmcheck.sources.hf import HFSource

    words = sorted({w for phrase in SUBJECTS + VERBS + OBJECTS for w in phrase.split()})[:57]
    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[EOS]", *words])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]  # transformers leaves it untyped
        tokenizer_object=core, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]")
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=len(vocab), n_positions=32, n_embd=32, n_layer=2, n_head=2,
                        bos_token_id=2, eos_token_id=2, pad_token_id=0)
    return HFSource(GPT2LMHeadModel(config), tokenizer)


def measure(label: str, source: TokenSource, prompt: str, settings: ExploreSettings) -> dict[str, Any]:
    model = explore(source, prompt, settings)
    st = model.stats
    query = parse_query('P=? [F "gender_bias>0"]')
    started = time.perf_counter()
    result = check_explored(model, query, parse_quantifications(["gender_bias"]))
    check_seconds = time.perf_counter() - started
    return {
        "source": label, "alpha": settings.alpha, "k": settings.k, "depth": settings.depth,
        "batch": source.max_batch, "states": model.size, "expanded": st.expanded, "model_calls": st.model_calls,
        "batches": st.batches, "calls_per_expanded": round(st.calls_per_expanded, 3),
        "prefixes_per_batch": round(st.prefixes_per_batch, 2),
        "states_per_s": round(model.size / st.seconds, 1), "explore_s": round(st.seconds, 3),
        "model_share": round(st.model_seconds / st.seconds, 3) if st.seconds else 0.0,
        "check_s": round(check_seconds, 3), "value": round(result.value, 6),
        "unexplored": round(model.unexplored_mass, 6),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller models (a smoke run)")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    rows = []
    ngram = NgramSource.from_text(synthetic_corpus(600 if args.quick else 3000), order=3, name="ngram-3")
    ngram_settings = ExploreSettings(alpha=0.9, k=6, depth=4 if args.quick else 6)
    rows.append(measure("ngram", ngram, "The player", ngram_settings))
    try:
        import torch

        torch.set_num_threads(1)  # steadier figures on a shared 2-core machine
        hf = tiny_transformer()
    except ImportError:
        print("(no torch/transformers: the tiny-transformer rows are skipped)", file=sys.stderr)
    else:
        hf_settings = ExploreSettings(alpha=0.5, k=4, depth=3 if args.quick else 4)
        for batch in (1, 16):
            hf.max_batch = batch
            rows.append(measure("tiny-gpt2", hf, "the player", hf_settings))
    headers = ["source", "alpha", "k", "depth", "batch", "states", "expanded", "model_calls", "batches",
               "calls_per_expanded", "prefixes_per_batch", "states_per_s", "model_share", "explore_s", "check_s",
               "unexplored"]
    print(C.table(headers, [[r[h] for h in headers] for r in rows], title="forewarn llmcheck exploration"))
    print(json.dumps(C.machine()))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"machine": C.machine(), "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
