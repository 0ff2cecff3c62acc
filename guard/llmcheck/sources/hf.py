"""A local Hugging Face causal language model as a token source (the ``hf`` extra).

``transformers`` and ``torch`` are imported only when this source is made, so the rest of
``forewarn`` starts fast and installs without them.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..._extras import require
from ..errors import SourceError
from .base import Candidate, Token, TokenDistribution, TokenSource


class HFSource(TokenSource):
    """A causal LM and its tokenizer; one forward pass per batch of prefixes.

    Prefixes of different lengths are left-padded, with an attention mask and explicit
    position ids, so a batched answer equals the one-prefix answer. Probabilities are the
    softmax of the last position's logits, in float64.

    Args:
        model: a ``transformers`` causal LM (``AutoModelForCausalLM``), or ``None`` to load ``path``.
        tokenizer: its tokenizer, or ``None`` to load ``path``.
        path: a local model directory or a model name (loaded with ``from_pretrained``).
        max_batch: prefixes per forward pass.
        device: torch device, e.g. ``"cpu"``.
        add_bos: prepend the tokenizer's BOS token to the start text (GPT-2-style models
            are usually fine without; Llama-style tokenizers add it themselves).
    """

    def __init__(self, model: Any = None, tokenizer: Any = None, *, path: str | None = None,
                 max_batch: int = 16, device: str = "cpu", add_bos: bool = False) -> None:
        require("hf", "the Hugging Face token source")
        import torch
        import transformers

        self._torch = torch
        if model is None or tokenizer is None:
            if path is None:
                raise SourceError("HFSource needs a model and a tokenizer, or a path to load them from")
            try:
                tokenizer = tokenizer or transformers.AutoTokenizer.from_pretrained(path)
                model = model or transformers.AutoModelForCausalLM.from_pretrained(path)
            except (OSError, ValueError) as exc:
                raise SourceError(f"cannot load a Hugging Face causal LM from {path!r}: "
                                  f"{str(exc).strip().splitlines()[0]}") from exc
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.device = device
        self.max_batch = max_batch
        self.add_bos = add_bos
        self.name = f"hf:{path or getattr(model.config, 'name_or_path', '') or type(model).__name__}"
        eos = tokenizer.eos_token_id
        self._eos: set[int] = set() if eos is None else {int(eos)}
        config_eos = getattr(model.config, "eos_token_id", None)
        if isinstance(config_eos, int):
            self._eos.add(config_eos)
        elif isinstance(config_eos, list):
            self._eos.update(int(e) for e in config_eos)
        self._special = set(getattr(tokenizer, "all_special_ids", []))
        self._pad = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else next(iter(self._eos), 0))

    def encode(self, text: str) -> tuple[Token, ...]:
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        if self.add_bos and self.tokenizer.bos_token_id is not None:
            ids = [self.tokenizer.bos_token_id, *ids]
        return tuple(int(i) for i in ids)

    def decode(self, tokens: Sequence[Token]) -> str:
        # the whole sequence at once: sub-word pieces and byte-level tokens join correctly;
        # no clean-up of spaces, so appending a token never rewrites the text before it
        return str(self.tokenizer.decode([int(t) for t in tokens], skip_special_tokens=True,  # type: ignore[call-overload]
                                         clean_up_tokenization_spaces=False))

    def next_tokens(self, sequences: Sequence[Sequence[Token]], top_k: int) -> list[TokenDistribution]:
        torch = self._torch
        if not sequences:
            return []
        if any(len(s) == 0 for s in sequences):
            raise SourceError("the Hugging Face source needs a non-empty start text (or add_bos=True)")
        width = max(len(s) for s in sequences)
        ids = torch.full((len(sequences), width), self._pad, dtype=torch.long)
        mask = torch.zeros((len(sequences), width), dtype=torch.long)
        for row, sequence in enumerate(sequences):
            ids[row, width - len(sequence):] = torch.tensor([int(t) for t in sequence], dtype=torch.long)  # type: ignore[call-overload]
            mask[row, width - len(sequence):] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        with torch.inference_mode():
            logits = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                                position_ids=positions.to(self.device)).logits[:, -1, :]
            probs = torch.softmax(logits.double(), dim=-1)
            top = torch.topk(probs, min(top_k, probs.shape[-1]), dim=-1)
        values, indices = top.values.tolist(), top.indices.tolist()
        out = []
        for row_values, row_indices in zip(values, indices):
            candidates = tuple(
                Candidate(int(i), float(p), self._piece(int(i)), eos=int(i) in self._eos)
                for p, i in zip(row_values, row_indices))
            out.append(TokenDistribution(candidates, complete=len(candidates) == probs.shape[-1]))
        return out

    def _piece(self, token: int) -> str:
        return str(self.tokenizer.convert_ids_to_tokens(token))
