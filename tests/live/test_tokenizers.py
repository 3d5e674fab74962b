"""Live check of rlid's tokenizer.json encoding and decoding against HF `tokenizers`.

The Rust library transformers uses (pinned in requirements.txt) encodes and decodes the same
seeded random strings and id sequences as `rlid tokenizer encode|decode --batch`, for Qwen3's
real tokenizer.json and for byte-level BPE files that `tokenizers` trains here. Every
comparison is exact; `report` counts the mismatching cases (tolerance 0) and the assertion
message shows the first one.
"""
from __future__ import annotations

import json
import random
import unicodedata

import pytest
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from conftest import RlidError, run_rlid

SEED = 20240611
N_STRINGS = 1200  # encoded per tokenizer (>= 1,000), with and without special-token splitting
N_RANDOM_ID_SEQS = 400  # random id sequences decoded per tokenizer

QWEN_SPECIAL = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
QWEN_ADDED = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "<|fim_prefix|>"]

WORDS = ["the", "The", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "Action", "A", "B",
         "HELLO", "hello", "world", "naïve", "café", "résumé", "Straße", "coöperate", "x", "I",
         "don't", "It's", "we're", "you've", "I'm", "they'll", "she'd", "IT'S", "WE'RE", "O'Neil",
         "rock'n'roll", "e-mail", "foo_bar", "fooBar", "http://x.org/a?b=1&c=2", "a.b.c", "$100",
         "3.14159", "1,000,000", "10^9", "C++", "#include", "<div>", "</div>", "```python",
         "def f(x):", "return x**2", "λx.x", "∀x∃y", "½", "Ⅻ", "①", "x²", "ﬁ", "Ｈｅｌｌｏ"]

SCRIPTS = {
    "cjk": "中文字符测试你好世界漢字日本語ひらがなカタカナ한국어조선글",
    "cyrillic": "Привет мир Съешь же ещё этих мягких французских булок ЁЖ",
    "greek": "Γειά σου κόσμε αβγδεζηθ ΑΒΓΔ",
    "arabic": "مرحبا بالعالم العربية ١٢٣٤٥ هذا اختبار",
    "hebrew": "שלום עולם עברית",
    "devanagari": "नमस्ते दुनिया हिन्दी क्षत्रिय १२३",
    "thai": "สวัสดีชาวโลก ภาษาไทย",
    "emoji": "😀😃😄🎉🚀🔥💯🇺🇸🇯🇵🏳️‍🌈👨‍👩‍👧‍👦👍🏽👋🏿🤷‍♀️❤️‍🔥🧑🏻‍💻⭐️✅",
    "math": "∑∏∫√∞≈≠≤≥±×÷∂∇",
    "symbols": "©®™€£¥§¶†‡•…‰′″‹›«»“”‘’„",
}
COMBINING = ["\u0301", "\u0308", "\u0327", "\u0303", "\u20dd", "\u0345", "\u093f", "\u0e31"]
SPACES = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", " \n ", "\u00a0", "\u2009",
          "\u3000", "\u2028", "\u202f", "\u200b", "\u0085", "\ufeff", "\x0b", "\x0c", " \t\n"]
PUNCT = list(".,;:!?()[]{}<>\"'`~@#$%^&*-_=+|\\/") + ["...", "--", "->", "=>", "!=", "::", "''", "'s",
                                                     "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T"]


def _piece(rng: random.Random, specials: list[str]) -> str:
    kind = rng.random()
    if kind < 0.30:
        return rng.choice(WORDS)
    if kind < 0.45:
        text = rng.choice(list(SCRIPTS.values()))
        i = rng.randrange(len(text))
        return text[i:i + rng.randint(1, 12)]
    if kind < 0.55:
        return rng.choice(SPACES) * rng.randint(1, 3)
    if kind < 0.63:
        return "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 25)))
    if kind < 0.73:
        return rng.choice(PUNCT)
    if kind < 0.78:
        return rng.choice("aeiouneAO") + "".join(rng.sample(COMBINING, rng.randint(1, 3)))
    if kind < 0.86 and specials:
        token = rng.choice(specials)
        r = rng.random()
        if r < 0.15:  # a partial special token stays text
            return token[:rng.randint(1, len(token) - 1)]
        return token
    if kind < 0.93:  # random assigned code points from the BMP and beyond
        out = []
        while len(out) < rng.randint(1, 6):
            cp = rng.choice([rng.randint(0x20, 0x7F), rng.randint(0xA0, 0x2FFF), rng.randint(0x3000, 0xD7FF),
                             rng.randint(0xE000, 0xFFFD), rng.randint(0x10000, 0x1FAFF)])
            if unicodedata.category(chr(cp)) != "Cn":
                out.append(chr(cp))
        return "".join(out)
    return rng.choice(["'s", "'t", "'re", " '", "'"]) + rng.choice(WORDS)


def generate_strings(seed: int, n: int, specials: list[str]) -> list[str]:
    rng = random.Random(seed)
    out = ["", " ", "\n", "a", "<|im_start|>", "<|im_start|>user\nhi<|im_end|>\n", "  \n\n  x  ", "1234567890" * 5,
           "e\u0301 vs \u00e9", "\U0001F468\u200D\U0001F469\u200D\U0001F467", "don't DON'T Don'T",
           "\u00a0\u00a0word", "x\u0085y", "\ufeffbom", "tab\there", "crlf\r\nline\r\n\r\n"]
    while len(out) < n:
        out.append("".join(_piece(rng, specials) for _ in range(rng.randint(1, 24))))
    return out


def check(report, name, bad, count, describe, **extra):
    """Reports `bad` (the mismatching cases) as the worst difference, tolerance 0; on failure the
    message shows the first mismatch as `describe` writes it."""
    try:
        report(name, len(bad), 0, count, **extra)
    except AssertionError as e:
        raise AssertionError(f"{e}; {len(bad)} mismatch(es), the first:\n{describe(*bad[0])}") from None


def rlid_encode(tok_path, strings, tmp_path, no_special):
    batch = tmp_path / f"strings_{'nospecial' if no_special else 'special'}.json"
    batch.write_text(json.dumps(strings, ensure_ascii=False), encoding="utf-8")
    args = ["tokenizer", "encode", "--tokenizer", tok_path, "--batch", batch]
    return json.loads(run_rlid(*args, *(["--no-special"] if no_special else [])))


def rlid_decode(tok_path, id_seqs, tmp_path, skip_special):
    batch = tmp_path / "ids.json"
    batch.write_text(json.dumps(id_seqs), encoding="utf-8")
    args = ["tokenizer", "decode", "--tokenizer", tok_path, "--batch", batch]
    out = json.loads(run_rlid(*args, *(["--skip-special"] if skip_special else [])))
    return [bytes.fromhex(o["text_hex"]) for o in out]


def check_encode(name, hf: Tokenizer, tok_path, strings, tmp_path, report):
    """Encoding, both ways of treating special tokens found in the text.

    rlid never applies the post-processor (the prompt renderer places BOS/EOS itself), so HF
    encodes with add_special_tokens=False. rlid's default splits special added tokens out of
    the text (HF's default); --no-special keeps them as text, which is HF's
    `encode_special_tokens = True` (non-special added tokens such as <think> stay matched in both).
    """
    all_ids = {}
    for no_special in (False, True):
        hf.encode_special_tokens = no_special
        want = [e.ids for e in hf.encode_batch(strings, add_special_tokens=False)]
        got = rlid_encode(tok_path, strings, tmp_path, no_special)
        bad = [(s, w, g) for s, w, g in zip(strings, want, got) if w != g]
        check(report, f"tokenizers.{name}.encode{'.no_special' if no_special else ''}", bad, len(strings),
              lambda s, w, g: f"text={s!r}\n HF   {w}\n rlid {g}", tokens=sum(map(len, want)))
        all_ids[no_special] = want
    hf.encode_special_tokens = False
    return all_ids[False] + all_ids[True]


def check_decode(name, hf: Tokenizer, tok_path, id_seqs, tmp_path, report):
    """Decoding, keeping and skipping special tokens.

    rlid returns the exact bytes of the tokens; HF's ByteLevel decoder concatenates the same
    bytes and then applies Rust's String::from_utf8_lossy, which replaces each maximal
    invalid subpart (Unicode's "best practice", also what Python's errors="replace" does) with
    one U+FFFD. So the rule is: HF's string == rlid's bytes decoded with errors="replace".
    Where rlid's bytes are valid UTF-8 this is byte identity; where they are not (random ids
    that split a multi-byte character), it compares the lossy text both would show.
    """
    for skip in (False, True):
        want = hf.decode_batch(id_seqs, skip_special_tokens=skip)
        got = rlid_decode(tok_path, id_seqs, tmp_path, skip)
        bad = [(ids, w, g) for ids, w, g in zip(id_seqs, want, got) if w != g.decode("utf-8", "replace")]
        invalid = sum(1 for g in got if not _is_utf8(g))
        check(report, f"tokenizers.{name}.decode{'.skip_special' if skip else ''}", bad, len(id_seqs),
              lambda ids, w, g: f"ids={ids}\n HF   {w!r}\n rlid {g!r}", invalid_utf8=invalid)


def _is_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def random_id_seqs(rng: random.Random, hf: Tokenizer, n: int, specials: list[int]) -> list[list[int]]:
    """Random ids: whole-vocabulary draws, single bytes (which split multi-byte characters),
    and special ids."""
    vocab = hf.get_vocab_size(with_added_tokens=True)
    byte_level = pre_tokenizers.ByteLevel.alphabet()
    byte_ids = [hf.token_to_id(c) for c in byte_level if hf.token_to_id(c) is not None]
    high_bytes = [hf.token_to_id(c) for c in byte_level if hf.token_to_id(c) is not None and ord(c) > 0x7e]
    out = []
    for _ in range(n):
        seq = []
        for _ in range(rng.randint(0, 20)):
            r = rng.random()
            if r < 0.5:
                seq.append(rng.randrange(vocab))
            elif r < 0.8:
                seq.append(rng.choice(high_bytes))
            elif r < 0.9:
                seq.append(rng.choice(byte_ids))
            else:
                seq.append(rng.choice(specials))
        out.append([i for i in seq if hf.id_to_token(i) is not None])
    return out


def _specials(hf: Tokenizer) -> list[int]:
    return [i for i, t in hf.get_added_tokens_decoder().items()]


def test_qwen3(rlid, qwen3_tokenizer_json, tmp_path, report):
    hf = Tokenizer.from_file(str(qwen3_tokenizer_json))
    strings = generate_strings(SEED, N_STRINGS, QWEN_SPECIAL + QWEN_ADDED)
    ids = check_encode("qwen3", hf, qwen3_tokenizer_json, strings, tmp_path, report)
    rng = random.Random(SEED + 1)
    seqs = ids[::2] + random_id_seqs(rng, hf, N_RANDOM_ID_SEQS, _specials(hf))
    check_decode("qwen3", hf, qwen3_tokenizer_json, seqs, tmp_path, report)


# ---- tokenizers trained here -------------------------------------------------------------------

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
TRAIN_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def _train(tok: Tokenizer, corpus: list[str], vocab_size: int, special: list[str]) -> Tokenizer:
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus, trainer=trainer)
    return tok


def gpt2_style() -> Tokenizer:
    """GPT-2: ByteLevel pre-tokenizer with its own regex, ByteLevel decoder, no normalizer."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    return tok


def gpt2_prefix_space() -> Tokenizer:
    """GPT-2 with add_prefix_space (RoBERTa-like pre-tokenization)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    return tok


def llama3_style() -> Tokenizer:
    """Llama-3: NFKC here (Qwen uses NFC), Split(regex, Isolated) + ByteLevel(use_regex=False),
    ignore_merges, and a non-special added token."""
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    return tok


def digits_removed_style() -> Tokenizer:
    """Split on a plain string with behaviour Removed, then a Split that isolates digits, then
    ByteLevel with its regex; NFD normalizer."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.Sequence([normalizers.NFD()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split("|", behavior="removed"),
        pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    return tok


TRAINED = {
    "bytelevel_gpt2": (gpt2_style, 2000, TRAIN_SPECIAL, []),
    "bytelevel_prefix_space": (gpt2_prefix_space, 1200, TRAIN_SPECIAL, []),
    "split_llama3_nfkc_ignore_merges": (llama3_style, 2500, TRAIN_SPECIAL, ["<think>", "</think>"]),
    "split_removed_nfd": (digits_removed_style, 1000, ["<|endoftext|>"], []),
}


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return generate_strings(SEED + 7, 3000, []) + [" ".join(WORDS)] * 5 + list(SCRIPTS.values()) * 5


@pytest.mark.parametrize("name", list(TRAINED))
def test_trained(rlid, name, corpus, tmp_path, report):
    make, vocab_size, special, added = TRAINED[name]
    hf = _train(make(), corpus, vocab_size, special)
    if added:
        hf.add_tokens(added)
    path = tmp_path / "tokenizer.json"
    hf.save(str(path))
    hf = Tokenizer.from_file(str(path))  # what rlid reads, exactly
    strings = generate_strings(SEED + 11, N_STRINGS, special + added)
    ids = check_encode(name, hf, path, strings, tmp_path, report)
    rng = random.Random(SEED + 13)
    seqs = ids[::2] + random_id_seqs(rng, hf, N_RANDOM_ID_SEQS, _specials(hf))
    check_decode(name, hf, path, seqs, tmp_path, report)


def test_invalid_utf8_round_trip(rlid, tmp_path, report, corpus):
    """Invalid UTF-8 cannot enter HF's encoder (it takes str); rlid encodes it as byte tokens.
    Check that HF decodes rlid's ids to the lossy text of the input (no normalizer here, so
    the valid runs come back unchanged)."""
    hf = _train(gpt2_style(), corpus, 800, TRAIN_SPECIAL)
    path = tmp_path / "tokenizer.json"
    hf.save(str(path))
    rng = random.Random(SEED + 17)
    bad_bytes = [b"\xff", b"\xc3", b"\xe4\xb8", b"\xf0\x9f\x98", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
                 b"\x80\x80", b"\xfe\xfe"]
    cases = []
    for _ in range(300):
        parts = [rng.choice(WORDS).encode() for _ in range(rng.randint(0, 3))]
        for _ in range(rng.randint(1, 3)):
            parts.insert(rng.randrange(len(parts) + 1), rng.choice(bad_bytes))
        cases.append(b" ".join(parts))
    # One rlid run (its start-up costs ~1 s): the cases joined by a special token, which is
    # split out before anything else, so each case is encoded on its own.
    eos = hf.token_to_id("<|endoftext|>")
    joined = json.loads(run_rlid("tokenizer", "encode", "--tokenizer", path, "-", input=b"<|endoftext|>".join(cases)))
    per_case = [[]]
    for i in joined:
        if i == eos:
            per_case.append([])
        else:
            per_case[-1].append(i)
    assert len(per_case) == len(cases)
    bad = []
    for raw, ids in zip(cases, per_case):
        text = hf.decode(ids)
        if text != raw.decode("utf-8", "replace"):
            bad.append((raw, ids, text))
    check(report, "tokenizers.invalid_utf8.rlid_encode_hf_decode", bad, len(cases),
          lambda raw, ids, text: f"input={raw!r}\n rlid ids {ids}\n HF decode {text!r}")


def _mutate(path, tmp_path, edit):
    j = json.loads(path.read_text(encoding="utf-8"))
    edit(j)
    out = tmp_path / "unsupported.json"
    out.write_text(json.dumps(j), encoding="utf-8")
    Tokenizer.from_file(str(out))  # HF loads it: the component is real, rlid just lacks it
    return out


UNSUPPORTED = {
    "pre_tokenizer 'Metaspace'": lambda j: j.update(
        pre_tokenizer={"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}),
    "decoder 'WordPiece'": lambda j: j.update(decoder={"type": "WordPiece", "prefix": "##", "cleanup": True}),
    "normalizer 'Lowercase'": lambda j: j.update(normalizer={"type": "Lowercase"}),
}


def test_unsupported_components_refused(rlid, corpus, tmp_path, report):
    hf = _train(gpt2_style(), corpus, 400, TRAIN_SPECIAL)
    path = tmp_path / "tokenizer.json"
    hf.save(str(path))
    bad = []
    for component, edit in UNSUPPORTED.items():
        mutated = _mutate(path, tmp_path, edit)
        try:
            run_rlid("tokenizer", "encode", "--tokenizer", mutated, "hello")
            bad.append((component, "accepted"))
        except RlidError as e:
            if f"{component} is not supported" not in e.stderr:
                bad.append((component, e.stderr))
    check(report, "tokenizers.unsupported_components_refused", bad, len(UNSUPPORTED),
          lambda component, what: f"{component}: rlid must refuse it with a ConfigError naming it; {what}")
