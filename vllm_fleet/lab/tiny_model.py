"""Build a tiny, deterministic Llama model directory locally (no hub access).

The model is random-weighted and useless for quality, but it is a real Llama
checkpoint that vLLM loads and serves: 2 layers, hidden 256, 4 query heads of
head_dim 64, 2 KV heads (GQA), a 1024-token byte-level BPE vocabulary trained
here on built-in text, bf16 safetensors, and a Llama-3 style chat template.

KV-cache bytes per token (bf16 KV): 2 (K and V) * 2 layers * 2 KV heads * 64 * 2 B
= 1024 B, i.e. exactly 1 KiB per token, which makes KV-capacity arithmetic easy.

It needs torch, transformers and tokenizers, which the vLLM venv has (see
tools/vllm_cpu_env.sh); the main project environment does not need them:

    VENV=$(tools/vllm_cpu_env.sh | tail -n1)
    PYTHONPATH=. "$VENV/bin/python" -m vllm_fleet.lab.tiny_model /tmp/tiny-llama
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SEED = 0
VOCAB_SIZE = 1024
HIDDEN_SIZE = 256
NUM_LAYERS = 2
HEAD_DIM = 64
NUM_HEADS = HIDDEN_SIZE // HEAD_DIM  # 4
NUM_KV_HEADS = 2
INTERMEDIATE_SIZE = 512
MAX_POSITIONS = 2048
DTYPE = "bfloat16"

BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"
EOT = "<|eot_id|>"
START_HEADER = "<|start_header_id|>"
END_HEADER = "<|end_header_id|>"
PAD = "<|pad|>"
SPECIAL_TOKENS = [BOS, EOS, PAD, START_HEADER, END_HEADER, EOT]

# Llama-3 style; `| trim` keeps the rendered prompt independent of stray whitespace.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
    "{{ message['content'] | trim }}{{ '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}"
)

_CORPUS = """\
vLLM is a fast and easy to use library for large language model inference and serving.
It manages attention key and value memory with paged attention, batches incoming
requests continuously, and exposes an OpenAI compatible HTTP server with completions,
chat completions, embeddings and metrics endpoints.
A fleet of bare metal GPU servers runs one vLLM process per model. Each server has a
fixed amount of GPU memory; the weights take a share of it, activations take another,
and whatever is left becomes the KV cache. The KV cache is split into blocks of sixteen
tokens, and the scheduler admits a request only when it can allocate enough blocks.
Beautiful is better than ugly. Explicit is better than implicit. Simple is better than
complex. Complex is better than complicated. Flat is better than nested. Sparse is
better than dense. Readability counts. Errors should never pass silently, unless
explicitly silenced. In the face of ambiguity, refuse the temptation to guess.
The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs.
How vexingly quick daft zebras jump! Sphinx of black quartz, judge my vow.
system user assistant tool function arguments content role name message messages
def main(argv: list[str]) -> int: return 0  # Python code also shows up in prompts
{"model": "tiny-llama", "prompt": "Hello", "max_tokens": 16, "temperature": 0.0}
0 1 2 3 4 5 6 7 8 9 10 16 32 64 128 256 512 1024 2048 4096 8192 16384 32768 65536
"""

_WORD_TEXT = """
the a an one two three four many some every this that these those model server
request token tokens block blocks cache memory gpu cpu node fleet cluster batch
prompt answer question user assistant system tool is are was were has have will
can should must may run runs serve serves load loads start stops wait fast slow
small large tiny huge good bad new old first last next long short and or but if
then else when while because so with without for from to of in on at by over
under about into through after before again hello world python rust config file
port host health metrics latency throughput queue scheduler
"""
_WORDS = _WORD_TEXT.split()


_SYLLABLES = [c + v for c in "bdfghklmnprstvz" for v in "aeiou"]


def corpus_lines(seed: int = SEED, sentences: int = 6000) -> Iterator[str]:
    """The built-in training text: a fixed paragraph set plus seeded synthetic sentences.

    The synthetic part mixes the English word list with numbers and pseudo-words made
    of syllables, so that BPE finds enough merges to fill all VOCAB_SIZE entries.
    ``random.Random(seed)`` is stable across Python versions, so is the text.
    """
    yield from _CORPUS.splitlines()
    rng = random.Random(seed)  # noqa: S311 - reproducible text, not security
    for _ in range(sentences):
        words = []
        for _ in range(rng.randint(4, 14)):
            kind = rng.random()
            if kind < 0.6:
                words.append(rng.choice(_WORDS))
            elif kind < 0.9:
                words.append("".join(rng.choices(_SYLLABLES, k=rng.randint(1, 3))))
            else:
                words.append(str(rng.randint(0, 99999)))
        words[0] = words[0].capitalize()
        yield " ".join(words) + rng.choice([".", ".", "?", "!", ","])


def _mod(name: str) -> Any:
    """Import lazily (and untyped) so the main project env needs none of these."""
    return importlib.import_module(name)


def build_tokenizer(seed: int = SEED) -> Any:
    """Train a byte-level BPE tokenizer of VOCAB_SIZE entries on the built-in corpus."""
    tk = _mod("tokenizers")
    tokenizer = tk.Tokenizer(tk.models.BPE())
    tokenizer.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus_lines(seed), trainer=trainer)
    bos_id = tokenizer.token_to_id(BOS)
    tokenizer.post_processor = tk.processors.TemplateProcessing(
        single=f"{BOS} $A",
        pair=f"{BOS} $A {BOS} $B",
        special_tokens=[(BOS, bos_id)],
    )
    fast = _mod("transformers").PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BOS,
        eos_token=EOT,
        pad_token=PAD,
        model_max_length=MAX_POSITIONS,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny_model(dest: Path, seed: int = SEED) -> Path:
    """Write the tiny Llama model (config, bf16 safetensors, tokenizer) into ``dest``."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    torch = _mod("torch")
    transformers = _mod("transformers")

    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(seed)

    config = transformers.LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=HIDDEN_SIZE,
        intermediate_size=INTERMEDIATE_SIZE,
        num_hidden_layers=NUM_LAYERS,
        num_attention_heads=NUM_HEADS,
        num_key_value_heads=NUM_KV_HEADS,
        head_dim=HEAD_DIM,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=tokenizer.convert_tokens_to_ids(BOS),
        eos_token_id=[tokenizer.convert_tokens_to_ids(EOT), tokenizer.convert_tokens_to_ids(EOS)],
        pad_token_id=tokenizer.convert_tokens_to_ids(PAD),
        tie_word_embeddings=False,
        dtype=DTYPE,
    )
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config).to(getattr(torch, DTYPE)).eval()
    model.generation_config = transformers.GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
    )
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    # transformers 5 writes "TokenizersBackend"; the classic name loads in 4.x and 5.x.
    tok_cfg_path = dest / "tokenizer_config.json"
    tok_cfg = json.loads(tok_cfg_path.read_text())
    tok_cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    tok_cfg_path.write_text(json.dumps(tok_cfg, indent=2, sort_keys=True) + "\n")
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("dest", type=Path, help="directory to write the model into")
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    print(build_tiny_model(args.dest, seed=args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
