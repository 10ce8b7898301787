"""Writes the two assets torchtitan's llama3 debug model reads, which its PyPI wheel does not
ship, made here rather than fetched: `tests/assets/tokenizer` (a byte-level BPE tokenizer of
821 tokens, trained with the `tokenizers` package on the text below, with torchtitan's
`<|begin_of_text|>` / `<|end_of_text|>` special tokens) and `tests/assets/c4_test` (400
documents of pseudo-words in C4's JSON-lines form, `{"text": ...}`). Deterministic.

Usage: torchtitan_assets.py DIR
"""

import json
import os
import random
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

root = sys.argv[1]
rng = random.Random(0)
syllables = ["ka", "ro", "mi", "te", "su", "lan", "dor", "vi", "ne", "pa", "lo", "qu", "ist", "en", "ar"]
words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 3))) for _ in range(600)]
docs = [" ".join(rng.choice(words) for _ in range(rng.randint(200, 600))) + "." for _ in range(400)]

os.makedirs(f"{root}/tests/assets/c4_test", exist_ok=True)
with open(f"{root}/tests/assets/c4_test/data.json", "w") as f:
    for d in docs:
        f.write(json.dumps({"text": d}) + "\n")

special = ["<|begin_of_text|>", "<|end_of_text|>"]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(docs, trainers.BpeTrainer(
    vocab_size=2000, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
os.makedirs(f"{root}/tests/assets/tokenizer", exist_ok=True)
tok.save(f"{root}/tests/assets/tokenizer/tokenizer.json")
with open(f"{root}/tests/assets/tokenizer/tokenizer_config.json", "w") as f:
    json.dump({"bos_token": special[0], "eos_token": special[1], "add_bos_token": True,
               "add_eos_token": False}, f)
print(f"torchtitan assets in {root}/tests/assets: vocabulary {tok.get_vocab_size()}")
