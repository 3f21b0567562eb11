"""Build a tiny Llama model (config, random bf16 weights, a BPE tokenizer) for real sglang.

Runs under the real-sglang environment's Python (it needs torch, transformers and tokenizers,
which the tuner's own environment does not have):

    python tests/support/tiny_llama.py OUT_DIR

The model: 2 layers, hidden size 128, 4 attention heads with 2 KV heads, a byte-level BPE
tokenizer of 2,048 tokens trained on Python's own help texts, a chat template, and seeded random
weights (about 2 MB). Everything is deterministic: the same Python and packages give the same
files. It answers with nonsense, which is all a serving benchmark needs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

VOCAB_SIZE = 2048
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>{{ message['content'] }}<|end|>"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]


def _corpus() -> list[str]:
    # Python's help topics: a few MB of English that every CPython ships, so no download.
    from pydoc_data.topics import topics

    return [topics[key] for key in sorted(topics)]


def build(out: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<|endoftext|>",
        eos_token="<|end|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = 2048
    fast.save_pretrained(out)

    config = LlamaConfig(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=2048,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    # Some transformers releases write `dtype`, older sglang code reads `torch_dtype`: keep both.
    config_path = out / "config.json"
    data = json.loads(config_path.read_text())
    data.setdefault("torch_dtype", "bfloat16")
    config_path.write_text(json.dumps(data, indent=2) + "\n")
    (out / "generation_config.json").unlink(missing_ok=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/support/tiny_llama.py OUT_DIR")
    build(Path(sys.argv[1]))
