"""A tiny Llama model directory for serving a real vLLM on CPUs, written locally, no downloads.

``write_tiny_llama(folder)`` writes a ``LlamaForCausalLM`` config (hidden 128, 2 layers, 4 heads of
32: vLLM's CPU attention backend has no head size 16) and a byte-level BPE tokenizer of a few hundred
tokens trained here with ``tokenizers`` on a fixed corpus, about 15 KB in all. There are no weights:
vLLM serves it with ``--load-format dummy`` (random weights), which is all a metrics test needs. The
same call writes the same bytes. Runs in the main virtualenv (``tokenizers`` comes with
``transformers``); ``python -m tests.support.tiny_llama DIR`` writes one by hand.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

CORPUS = (
    "The quick brown fox jumps over the lazy dog.",
    "Hello world, this is a tiny test model for vLLM.",
    "Metrics such as latency, throughput and cache usage are exported.",
    "Once upon a time there was a small language model.",
    "0 1 2 3 4 5 6 7 8 9 10 100 1000",
)
SPECIAL = ("<unk>", "<s>", "</s>")
MAX_MODEL_LEN = 256

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    # vLLM's CPU attention supports head sizes 32, 64, 80, 96, 112, 128, ...; 16 fails at start.
    "head_dim": 32,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "float32",
}


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def write_tiny_llama(folder: Path) -> Path:
    """Write the model directory into ``folder`` (created if missing) and return it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=list(SPECIAL),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    tok.save(str(folder / "tokenizer.json"))
    _write_json(
        folder / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": "<s>",
            "eos_token": "</s>",
            "unk_token": "<unk>",
            "pad_token": "</s>",
            "model_max_length": MAX_MODEL_LEN,
            "add_bos_token": False,
            "clean_up_tokenization_spaces": False,
        },
    )
    _write_json(folder / "config.json", {**CONFIG, "vocab_size": tok.get_vocab_size()})
    _write_json(folder / "generation_config.json", {"bos_token_id": 1, "eos_token_id": 2})
    return folder


if __name__ == "__main__":
    print(write_tiny_llama(Path(sys.argv[1])))
