"""Tiny causal language models (random weights, nothing downloaded) and the uneven data the tests feed them.

Every batch holds rows of different lengths, padded on the right with label -100, so each rank's and
each microbatch's count of valid tokens differ: the mistakes the tests plant are all visible.
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import nn

VOCAB = 32
IGNORE = -100

# Row lengths in sampler order; a length-L row has L − 1 labels after the causal shift. With batches of
# two rows dealt to W = 2 ranks in turn, rank 0 holds batches 0, 2, 4, … and rank 1 batches 1, 3, 5, …;
# no two microbatches of a window, and no two ranks, hold the same count.
LENGTHS = [7, 3, 5, 6, 2, 9, 4, 8, 6, 2, 3, 7, 8, 5, 9, 4, 5, 2, 7, 9]


class TinyLM(nn.Module):
    """An embedding, a tanh and a linear head: logits for every position (plain torch, no framework)."""

    def __init__(self, seed: int = 0, width: int = 16) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.embed = nn.Embedding(VOCAB, width)
        self.hidden = nn.Linear(width, width)
        self.head = nn.Linear(width, VOCAB)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.hidden(self.embed(input_ids))))


def shifted(logits: torch.Tensor, labels: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Position t predicts label t + 1: the flattened logits and targets the loss sees."""
    return logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1)


def valid_count(labels: torch.Tensor) -> int:
    """The labels a causal loss counts in a padded batch (after the shift)."""
    return int((labels[:, 1:] != IGNORE).sum())


def llama_config(**overrides: Any) -> Any:
    """A two-head, one-layer Llama config with a 32-token vocabulary."""
    from transformers import LlamaConfig

    settings: Dict[str, Any] = dict(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                    num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                                    pad_token_id=0, bos_token_id=1, eos_token_id=2)
    settings.update(overrides)
    return LlamaConfig(**settings)


def llama(seed: int = 0) -> Any:
    """A ``LlamaForCausalLM`` with random weights from ``seed``."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(llama_config())


def row(index: int, length: int) -> torch.Tensor:
    """The token ids of row ``index`` (a fixed pseudo-random sequence of ``length`` ids from 3 to VOCAB − 1)."""
    generator = torch.Generator().manual_seed(1000 + index)
    return torch.randint(3, VOCAB, (length,), generator=generator)


class Rows(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Rows of the given lengths as {"input_ids", "labels"} (labels = the ids, shifted inside the model)."""

    def __init__(self, lengths: Sequence[int]) -> None:
        self.lengths = list(lengths)

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, index: int) -> Dict[str, torch.Tensor]:
        ids = row(index, self.lengths[index])
        return {"input_ids": ids, "labels": ids.clone()}


def collate(items: List[Dict[str, torch.Tensor]]) -> Dict[str, torch.Tensor]:
    """Pads on the right: id 0, label -100, attention mask 0."""
    width = max(len(item["input_ids"]) for item in items)
    ids = torch.zeros(len(items), width, dtype=torch.long)
    labels = torch.full((len(items), width), IGNORE, dtype=torch.long)
    mask = torch.zeros(len(items), width, dtype=torch.long)
    for k, item in enumerate(items):
        n = len(item["input_ids"])
        ids[k, :n] = item["input_ids"]
        labels[k, :n] = item["labels"]
        mask[k, :n] = 1
    return {"input_ids": ids, "labels": labels, "attention_mask": mask}


class CountIgnoringLM(nn.Module):
    """A causal LM whose forward takes ``**kwargs`` but ignores ``num_items_in_batch``: it returns its mean.

    The Trainer sees ``**kwargs``, concludes the model normalizes by ``num_items_in_batch`` itself, and
    so neither divides by G nor lets the model's mean stand alone; the model averages each microbatch
    over its own tokens (transformers #37208).
    """

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        self.inner = llama(seed)
        self.config = self.inner.config

    def forward(self, input_ids: torch.Tensor, attention_mask: Any = None, labels: Any = None,
                **kwargs: Any) -> Dict[str, torch.Tensor]:
        logits = self.inner(input_ids=input_ids, attention_mask=attention_mask).logits
        if labels is None:
            return {"logits": logits}
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), labels[:, 1:].reshape(-1),
                               ignore_index=IGNORE)
        return {"loss": loss, "logits": logits}


CHARACTERS = "abcd"


def tiny_tokenizer() -> Any:
    """A word-level tokenizer over four letters and the special tokens, built here (nothing downloaded)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocabulary = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3}
    for character in CHARACTERS:
        vocabulary[character] = len(vocabulary)
    tokenizer = Tokenizer(models.WordLevel(vocab=vocabulary, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>")


def small_llama(vocab_size: int, seed: int = 0) -> Any:
    """A ``LlamaForCausalLM`` over a small vocabulary: with 8 tokens, sampled completions often end early."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(llama_config(vocab_size=vocab_size))
