"""Random-init models built from a config, with a tokenizer made on the spot: what ``rlvr doctor
--smoke`` and ``benchmarks/gpu_check.py`` train where no hub or model file can be reached.

The tokenizer is byte-level BPE with no merges: the 256 byte symbols, three special tokens
(``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``) and filler tokens up to the model's
vocabulary, so every id the random model samples decodes to text, and the text differs between
samples (what a reward that hashes the text needs). A ChatML template comes with it.
"""

from __future__ import annotations

from pathlib import Path

# name -> Llama shape. "1.4b": 24 layers of 2048 (1.42 B parameters with SmolLM2's 49,152-token
# vocabulary, untied head), the shape benchmarks/gpu_check.py times rlvr and TRL on.
SHAPES = {
    "tiny": dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=1, vocab_size=1024, tie_word_embeddings=True),
    "small": dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=8, num_attention_heads=8,
                  num_key_value_heads=4, vocab_size=8192, tie_word_embeddings=True),
    "1.4b": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=24, num_attention_heads=16,
                 num_key_value_heads=8, vocab_size=49152, tie_word_embeddings=False),
}
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def make_tokenizer(vocab_size: int):
    """A transformers fast tokenizer of exactly ``vocab_size`` ids (at least 259)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    if vocab_size < 256 + len(SPECIALS):
        raise ValueError(f"a vocabulary of {vocab_size} ids cannot hold the 256 bytes and {len(SPECIALS)} special tokens")
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {symbol: i for i, symbol in enumerate(sorted(alphabet))}
    for special in SPECIALS:
        vocab[special] = len(vocab)
    letters = "abcdefghijklmnopqrstuvwxyz"
    while len(vocab) < vocab_size:  # fillers: never produced by encoding, decoded as text
        n, word = len(vocab), ""
        while True:
            n, r = divmod(n, 26)
            word += letters[r]
            if not n:
                break
        vocab["Ġ" + word] = len(vocab)
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token=SPECIALS[0], pad_token=SPECIALS[0],
                                  additional_special_tokens=list(SPECIALS[1:]))
    tok.chat_template = CHATML
    return tok


def build_tiny_model(folder: str | Path, shape: str = "tiny", *, seed: int = 0, reward_model: bool = False,
                     dtype: str = "float32", max_positions: int = 2048, device: str | None = "cpu") -> Path:
    """A random-init Llama of ``shape`` (``SHAPES``) and its tokenizer saved in ``folder``
    (safetensors); with ``reward_model`` a sequence classifier of one label instead. ``device``:
    where the weights are drawn (None: a GPU when there is one, seconds instead of a minute at 1.4B)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification

    folder = Path(folder)
    dims = dict(SHAPES[shape])
    tok = make_tokenizer(dims["vocab_size"])
    config = LlamaConfig(**dims, max_position_embeddings=max_positions, bos_token_id=tok.eos_token_id,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                         **({"num_labels": 1} if reward_model else {}))
    if device is None:
        from rlvr.kit.device import device_policy

        device = device_policy().device_type
    torch.manual_seed(seed)
    with torch.device(device):
        model = (LlamaForSequenceClassification if reward_model else LlamaForCausalLM)(config)
    model.to(getattr(torch, dtype)).save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    return folder
