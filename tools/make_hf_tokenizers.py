#!/usr/bin/env python3
"""Reference data for flashserve's tokenizer.json loader, made with Hugging Face `tokenizers` itself.

Two steps:
  make_hf_tokenizers.py corpus OUT.json
      writes the test corpus (a JSON list of strings: English, code, CJK, emoji, whitespace runs,
      tabs/newlines, odd punctuation, mojibake, added-token spellings). Needs nothing beyond python.
  make_hf_tokenizers.py build CORPUS.json OUTDIR [FAMILY,FAMILY,...]
      trains one small tokenizer per family (all of them, or those named) on a text assembled
      from the corpus (needs `tokenizers`; `transformers` too for the transformers ids), and
      writes, per family, OUTDIR/<family>/tokenizer.json (+ tokenizer_config.json) and
      OUTDIR/<family>/reference.json: for every corpus line and the family's own extra lines the
      ids with and without special tokens (tokenizers' encode), the ids with special-token
      spellings kept as text (encode_special_tokens, flashserve's encode), the ids transformers'
      tokenizer(text) gives, and decode round trips; chat prompts in the family's template style
      with the byte ranges of their messages and the ids of encode(text, add_special_tokens=False)
      (what apply_chat_template gives, and flashserve's encode_with_special_tokens must); plus
      random id sequences and their decode(skip_special_tokens=True). Families:
        gpt2     GPT-2 / SmolLM2: ByteLevel pre-tokenizer with its own regex, ByteLevel decoder
        llama3   Llama 3: Split(Llama 3 regex) + ByteLevel(use_regex=false), ignore_merges,
                 TemplateProcessing with <|begin_of_text|>, specials appended after the vocab
        qwen2    Qwen 2: NFC, Split(Qwen regex) + ByteLevel, <|im_start|>/<|im_end|>, no BOS
        llama2   Llama 2 converted from SentencePiece: Prepend+Replace normalizer, no
                 pre-tokenizer, byte_fallback, <0xNN> pieces, Replace/ByteFallback/Fuse/Strip decoder,
                 merges written in the old "a b" string form
        mistral  Metaspace(prepend_scheme=first, split=false), byte_fallback, Metaspace decoder
        digits   NFKC, Digits + Metaspace(always, split), <unk> without byte fallback, <s> $A </s>
        mixed    Split with String/Regex patterns, every behaviour and invert, Digits,
                 ByteLevel(add_prefix_space) with its regex, Replace normalizer
        gemma    Gemma: SentencePiece-style BPE with byte fallback, Replace(" " -> "▁") normalizer
                 only, no pre-tokenizer, <start_of_turn>/<end_of_turn>
        phi3     Phi-3: Llama 2 style with chat tokens carrying rstrip (<|user|>, <|end|>, ...)
        falcon   Falcon: Punctuation(contiguous) + ByteLevel + Digits + Split("[0-9]{3}"), its
                 >>TITLE<< style specials; plus an NFKC normalizer and added tokens with lstrip,
                 rstrip, single_word and normalized true/false, so every flag is exercised
        punct_<behavior>  Punctuation with behavior isolated / removed / merged_with_previous /
                 merged_with_next, then ByteLevel
        granite  Granite 3: GPT-2 ByteLevel, <|start_of_role|>/<|end_of_role|>/<|end_of_text|>
        olmo2    OLMo 2: Split(cl100k-style regex) + ByteLevel, <|endoftext|> <|pad|>
        smollm3  SmolLM3: Llama 3 style (ignore_merges) with ChatML specials
Errors in one family are recorded in OUTDIR/errors.txt and the others still run.
"""
import json
import os
import random
import sys
import traceback

SPECIAL_GPT2 = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
LLAMA3_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                  "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
QWEN_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
FALCON_SPECIAL = [">>TITLE<<", ">>ABSTRACT<<", ">>INTRODUCTION<<", ">>SUMMARY<<", ">>COMMENT<<",
                  ">>ANSWER<<", ">>QUESTION<<", ">>DOMAIN<<", ">>PREFIX<<", ">>SUFFIX<<",
                  ">>MIDDLE<<", "<|endoftext|>"]
GRANITE_SPECIAL = ["<|end_of_text|>", "<fim_prefix>", "<|start_of_role|>", "<|end_of_role|>",
                   "<|tool_call|>"]
PHI3_CHAT = ["<|assistant|>", "<|end|>", "<|system|>", "<|user|>", "<|placeholder1|>"]

# Lines each family encodes besides the shared corpus: its own special and added tokens in
# contexts where lstrip / rstrip / single_word / normalized decide the ids.
EXTRA_LINES = {
    "gemma": ["<start_of_turn>user\nHello there<end_of_turn>\n<start_of_turn>model\n",
              "<start_of_turn> spaced <end_of_turn>  x", "a  b   c\n\n\td"],
    "phi3": ["<|user|>\nHello!<|end|>\n<|assistant|>\n", "<|system|>  \n\t x<|end|>\n\n",
             "a <|user|> b<|end|>c", "<|end|><|end|>\n<|end|>", " <|assistant|>  "],
    "falcon": ["a  <lsp>b", "x<rsp>  \n y", "p \t<both>\u3000q", "<rsp> <lsp>", "<lsp><lsp>",
               "hello hello, helloworld _hello 1hello \u00e9hello \u2014hello\u2014",
               "\ufb01ne fine FINE \ufb00 ff", ">>TITLE<<Hello>>ABSTRACT<< x >>ANSWER<<",
               "wait... what?! (yes) [no] {maybe} \u00bfs\u00ed? \u00a1no! 1,234,567.89 $5 +/-",
               "User: Hello!\nFalcon: Hi there."],
    "granite": ["<|start_of_role|>user<|end_of_role|>Hello<|end_of_text|>\n"
                "<|start_of_role|>assistant<|end_of_role|>"],
    "olmo2": ["<|endoftext|><|user|>\nHello\n<|assistant|>\n", "<|pad|><|pad|>x"],
    "smollm3": ["<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"],
}
for _b in ("isolated", "removed", "merged_with_previous", "merged_with_next"):
    EXTRA_LINES["punct_" + _b] = EXTRA_LINES["falcon"][8:]

# Chat prompts as the family's template renders them: (text, is_message) segments. Messages spell
# no special token, so HF's encode of the whole text is the reference for the special split.
_MSGS = ["Hello!", "  two spaces, then a tab\t", "\nstarts with a newline", "ends with spaces  ",
         "caf\u00e9 \u65e5\u672c \U0001F600 hello world", ""]


def _turns(before, after, msgs=_MSGS):
    return [[(before, False), (m, True), (after, False)] for m in msgs]


CHAT_CASES = {
    "gemma": _turns("<s><start_of_turn>user\n", "<end_of_turn>\n<start_of_turn>model\n"),
    "phi3": _turns("<|user|>\n", "<|end|>\n<|assistant|>\n") + [
        [("<s><|system|>\n", False), ("You are helpful.", True), ("<|end|>\n<|user|>\n", False),
         ("Hi", True), ("<|end|>\n<|assistant|>\n", False), ("Hello there.", True),
         ("<|end|>\n<|user|>\n", False), ("Bye", True), ("<|end|>\n<|assistant|>\n", False)]],
    "falcon": _turns("User: ", "\nFalcon:") + _turns("<rsp>\n", "  <lsp> x <both>  "),
    "granite": _turns("<|start_of_role|>user<|end_of_role|>",
                      "<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>"),
    "olmo2": _turns("<|endoftext|><|user|>\n", "\n<|assistant|>\n"),
    "smollm3": _turns("<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n"),
    "qwen2": _turns("<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n"),
    "llama3": _turns("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n",
                     "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"),
    "llama2": _turns("<s>[INST] ", " [/INST]"),
    "mistral": _turns("<s>[INST]", "[/INST]"),
}

LLAMA3_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
              r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
            r"\s*[\r\n]+|\s+(?!\S)|\s+")


# ---- corpus ---------------------------------------------------------------------------------
def make_corpus():
    lines = [
        "Once upon a time, there was a little girl named Lily.",
        "She loved to play outside in the sun. One day, she saw a big, red ball!",
        "The quick brown fox jumps over the lazy dog; THE QUICK BROWN FOX.",
        "It's, they're, we've, I'm, you'll, he'd, IT'S, They'RE, don't",
        "h\u00e9llo w\u00f6rld \u2014 \u00e7a va? na\u00efve caf\u00e9 \u00fcber stra\u00dfe",
        "e\u0301 (decomposed e + acute) vs \u00e9, A\u030a vs \u00c5, \u1100\u1161 vs \uac00",
        "\ufb01 ligature, \u2460 circled one, \uff21\uff22\uff23 fullwidth, \u00bd half, x\u00b2",
        "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002\u4e2d\u6587\u4e5f\u53ef\u4ee5\u3002",
        "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8, \u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22, "
        "\u0939\u093f\u0928\u094d\u0926\u0940",
        "emoji: \U0001F600\U0001F44D\U0001F3FD \U0001F1EF\U0001F1F5 family "
        "\U0001F468\u200D\U0001F469\u200D\U0001F467 \u2764\ufe0f",
        "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u0420\u0443\u0441\u0441\u043a\u0438\u0439 "
        "\u05e2\u05d1\u05e8\u05d9\u05ea \u0627\u0644\u0639\u0631\u0628\u064a\u0629",
        "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
        "for (int i = 0; i < 10; ++i) { sum += a[i] * b[i]; }  // dot product",
        "#include <stdio.h>\nint main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}",
        "SELECT id, name FROM users WHERE age >= 21 ORDER BY name DESC;",
        "{\"key\": [1, 2.5, -3e10, true, null], \"nested\": {\"a\": \"b\"}}",
        "    four leading spaces",
        "trailing spaces    ",
        "multiple   spaces\tand\ttabs\nnew lines\n\n",
        "\r\nwindows\r\nline endings\r\n",
        "\n\n\n",
        "   ",
        " ",
        "\t",
        "a",
        "",
        "1234567890 3.14159 1,000,000 0x1F 2024-11-25 12:30:45",
        "\u0663\u0664\u0665 arabic-indic, \u096a\u096b devanagari digits, \u2163 roman",
        "!!! ??? ... --- *** ### @@@ $$$ %%% ^^^ &&& ((( ))) [[[ ]]] {{{ }}} ||| ~~~",
        "\u00ab\u00bb \u201c\u201d \u2018\u2019 \u2026 \u00bf\u00a1 \u3001\u3002 \u300c\u300d \u2013\u2014",
        "zero\u200bwidth\u200cjoin\u200dnon\ufeffbom",
        "nbsp\u00a0here, thin\u2009space, ideographic\u3000space, line\u2028sep, nel\u0085x",
        "control \x01\x02\x1b[0m bell\x07 del\x7f null\x00end",
        "\ufffd replacement char, lone \ufffd\ufffd",
        "mojibake: \u00c3\u00a9 \u00c3\u00bc \u00e2\u20ac\u2122 \u00c3\u0192\u00c2\u00a9",
        "mixed \U0001F600\u65e5\u672cabc \u00e9 \u20ac100 \U00010348 gothic \U0001D11E clef",
        "x\U0001F600y",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "\u4e00" * 40,
        "https://example.com/path?query=1&x=y#frag user@mail.org",
        "<|im_start|>user\nHello there!<|im_end|>\n<|im_start|>assistant\n",
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
        "<s>[INST] What is 2+2? [/INST] 4</s>",
        "text<|endoftext|>more text <|endoftext|> spaced",
        "<|im_start|><|im_end|><|im_start|>",
        "almost special <|im_start and <|eot_id| and <s and </",
        "literal byte pieces <0x41> <0xE6> <unk> <mask>",
        "a <mask> b  <mask>  c<mask>d",
        "hello world foo bar foobar barfoo hello_world",
        "   <|endoftext|>   ",
        "Numbers: 1 12 123 1234 12345 123456 1234567",
        "CamelCaseIdentifier snake_case_name kebab-case-name SCREAMING_CASE",
        "\u00a9\u00ae\u2122 \u00b0C \u00b5s \u2211\u222b\u221a\u221e \u2260\u2264\u2265",
        "\u0000\u0001 leading controls",
        "tab\tin\tthe\tmiddle\t\tdouble",
        "ends with newline\n",
        " leading space then words",
    ]
    rng = random.Random(20261125)
    pool = ["a", " ", "\u00e9", "\u65e5", "\U0001F600", "\n", "  ", "\u20ac", "Z", "\u0416", "1", "'s",
            "\t", "<|im_end|>", "-", "\u0301", "\U0001F3FD", "ab", "\r\n", "0"]
    for _ in range(60):
        lines.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 12))))
    return lines


def training_text(corpus):
    """A few hundred KB: the corpus, English-like sentences, code and CJK, repeated with variation."""
    rng = random.Random(7)
    words = ("the of and to in is was that for it with as his on be at by had are but from or "
             "have an they which one you were her all she there would their we him been has when "
             "who will more no if out so said what up its about into than them can only other new "
             "time could these two may then do first any my now such like our over man me even "
             "most made after also did many before must through back years where much your way "
             "well down should because each just those people how too little state good very make "
             "world still own see men work long get here between both life being under never day "
             "same another know while last might us great old year off come since against go came "
             "right used take three").split()
    out = list(corpus) * 3
    for _ in range(3000):
        n = rng.randint(4, 18)
        s = " ".join(rng.choice(words) for _ in range(n))
        s = s[0].upper() + s[1:] + rng.choice([".", "!", "?", ",", ";", ":"])
        if rng.random() < 0.2:
            s += " " + str(rng.randint(0, 100000))
        out.append(s)
    code = ["def f(x):\n    return x * 2\n", "int main() { return 0; }\n", "if (a == b) {\n\tc++;\n}\n",
            "for i in range(10):\n    print(i)\n", "const x = [1, 2, 3].map(v => v + 1);\n"]
    out += code * 100
    cjk = "\u4eca\u65e5\u306f\u3044\u3044\u5929\u6c17\u3067\u3059\u3002\u6211\u4eec\u662f\u670b\u53cb\u3002"
    out += [cjk] * 100 + ["\U0001F600\U0001F44D \u2764\ufe0f"] * 50
    return out


# ---- families -------------------------------------------------------------------------------
def family_builders(t):
    from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                            pre_tokenizers, processors, trainers)

    def bl_trainer(vocab, special=()):
        return trainers.BpeTrainer(vocab_size=vocab, special_tokens=list(special), min_frequency=2,
                                   initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                   show_progress=False)

    def gpt2():
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = decoders.ByteLevel()
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        tok.train_from_iterator(t, bl_trainer(1200, SPECIAL_GPT2))
        tok.add_tokens([AddedToken("<tool>", special=False, normalized=False),
                        AddedToken("foo bar", single_word=True, normalized=True)])
        cfg = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "unk_token": "<|endoftext|>",
               "tokenizer_class": "GPT2Tokenizer", "add_prefix_space": False,
               "clean_up_tokenization_spaces": False, "model_max_length": 8192}
        return tok, cfg

    def llama3():
        tok = Tokenizer(models.BPE(ignore_merges=True))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PAT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        tok.train_from_iterator(t, bl_trainer(1500))
        tok.add_special_tokens(LLAMA3_SPECIAL)
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                          pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                          special_tokens=[("<|begin_of_text|>", bos)])])
        cfg = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
               "tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": True,
               "model_input_names": ["input_ids", "attention_mask"], "model_max_length": 131072}
        return tok, cfg

    def qwen2():
        tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN_PAT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        tok.train_from_iterator(t, bl_trainer(1400))
        tok.add_special_tokens(QWEN_SPECIAL)
        cfg = {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
               "add_prefix_space": False, "errors": "replace", "split_special_tokens": False,
               "tokenizer_class": "Qwen2Tokenizer", "clean_up_tokenization_spaces": False,
               "model_max_length": 32768}
        return tok, cfg

    def sentencepiece_style(vocab_size, pre_tok, normalizer, decoder, old_merges):
        # Train with a Metaspace pre-tokenizer (so merges stay within words), then rebuild the
        # JSON the way SentencePiece conversions look: <unk> <s> </s>, 256 <0xNN> pieces, vocab.
        base = Tokenizer(models.BPE(unk_token="<unk>"))
        base.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
        tr = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False)
        base.train_from_iterator(t, tr)
        j = json.loads(base.to_str())
        trained = sorted(j["model"]["vocab"].items(), key=lambda kv: kv[1])
        vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
        for b in range(256):
            vocab["<0x%02X>" % b] = len(vocab)
        for piece, _ in trained:
            if piece not in vocab:
                vocab[piece] = len(vocab)
        merges = j["model"]["merges"]
        merges = [m if isinstance(m, list) else m.split(" ") for m in merges]
        if old_merges:
            merges = [" ".join(m) for m in merges]
        tok = Tokenizer(models.BPE(vocab=vocab, merges=[tuple(m) if isinstance(m, list)
                                                        else tuple(m.split(" ")) for m in merges],
                                   unk_token="<unk>", byte_fallback=True, fuse_unk=True))
        tok.add_special_tokens(["<unk>", "<s>", "</s>"])
        if normalizer is not None:
            tok.normalizer = normalizer
        if pre_tok is not None:
            tok.pre_tokenizer = pre_tok
        tok.decoder = decoder
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A", pair="<s> $A <s> $B:1", special_tokens=[("<s>", 1)])
        tok.add_tokens([AddedToken("<mask>", lstrip=True, rstrip=False, special=False,
                                   normalized=False)])
        if old_merges:  # the JSON itself gets the "a b" form
            jj = json.loads(tok.to_str())
            jj["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m
                                     for m in jj["model"]["merges"]]
            tok = Tokenizer.from_str(json.dumps(jj, ensure_ascii=False))
        return tok

    def llama2():
        tok = sentencepiece_style(
            1000, None,
            normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")]),
            decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                               decoders.Fuse(), decoders.Strip(" ", 1, 0)]), old_merges=True)
        cfg = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
               "add_eos_token": False, "legacy": True, "tokenizer_class": "LlamaTokenizer",
               "clean_up_tokenization_spaces": False, "model_max_length": 4096}
        return tok, cfg

    def mistral():
        tok = sentencepiece_style(
            900, pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False),
            None,
            decoders.Sequence([decoders.ByteFallback(), decoders.Fuse(),
                               decoders.Metaspace(replacement="\u2581", prepend_scheme="first",
                                                  split=False)]), old_merges=False)
        cfg = {"bos_token": {"content": "<s>", "lstrip": False, "normalized": False,
                             "rstrip": False, "single_word": False},
               "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
               "add_eos_token": False, "legacy": False, "tokenizer_class": "LlamaTokenizer",
               "clean_up_tokenization_spaces": False}
        return tok, cfg

    def digits():
        tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=False))
        tok.normalizer = normalizers.NFKC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)])
        tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
        tr = trainers.BpeTrainer(vocab_size=700, min_frequency=2, show_progress=False,
                                 special_tokens=["<unk>", "<s>", "</s>"])
        tok.train_from_iterator(t, tr)
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A </s>", pair="<s> $A </s> $B:1 </s>:1",
            special_tokens=[("<s>", 1), ("</s>", 2)])
        cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "</s>",
               "unk_token": "<unk>", "bos_token": "<s>"}
        return tok, cfg

    def mixed():
        tok = Tokenizer(models.BPE())
        tok.normalizer = normalizers.Sequence([normalizers.Replace(Regex(r"[ \t]+\n"), "\n"),
                                               normalizers.Replace("``", "\"")])
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(" ", behavior="merged_with_next"),
            pre_tokenizers.Split(Regex(r"\p{P}+"), behavior="contiguous"),
            pre_tokenizers.Split(Regex(r"[a-z]+"), behavior="merged_with_previous", invert=True),
            pre_tokenizers.Split(Regex(r"\n"), behavior="removed"),
            pre_tokenizers.Digits(individual_digits=False),
            pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)])
        tok.decoder = decoders.ByteLevel()
        tok.train_from_iterator(t, bl_trainer(900, ["<pad>"]))
        cfg = {"tokenizer_class": "PreTrainedTokenizerFast"}
        return tok, cfg

    fast = {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False}

    def gemma():
        tok = sentencepiece_style(
            1000, None, normalizers.Replace(" ", "\u2581"),
            decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                               decoders.Fuse()]), old_merges=False)
        tok.add_special_tokens(["<start_of_turn>", "<end_of_turn>"])
        return tok, dict(fast, bos_token="<s>", eos_token="<end_of_turn>", unk_token="<unk>")

    def phi3():
        tok = sentencepiece_style(
            1000, None,
            normalizers.Sequence([normalizers.Prepend("\u2581"),
                                  normalizers.Replace(" ", "\u2581")]),
            decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                               decoders.Fuse(), decoders.Strip(" ", 1, 0)]), old_merges=False)
        tok.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)] +
                               [AddedToken(c, special=True, rstrip=True, normalized=False)
                                for c in PHI3_CHAT])
        return tok, dict(fast, bos_token="<s>", eos_token="<|endoftext|>", unk_token="<unk>")

    def falcon():
        tok = Tokenizer(models.BPE())
        tok.normalizer = normalizers.NFKC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Punctuation(behavior="contiguous"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
            pre_tokenizers.Digits(individual_digits=False),
            pre_tokenizers.Split(Regex("[0-9][0-9][0-9]"), behavior="isolated", invert=False)])
        tok.decoder = decoders.ByteLevel()
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        tok.train_from_iterator(t, bl_trainer(1000, FALCON_SPECIAL))
        tok.add_special_tokens([
            AddedToken("<lsp>", special=True, lstrip=True, normalized=False),
            AddedToken("<rsp>", special=True, rstrip=True, normalized=False),
            AddedToken("<both>", special=True, lstrip=True, rstrip=True, normalized=False)])
        tok.add_tokens([
            AddedToken("hello", special=False, single_word=True, normalized=False),
            AddedToken("\ufb01ne", special=False, normalized=True),   # matches "fine" after NFKC
            AddedToken("\ufb00", special=False, normalized=False)])   # only the raw ligature
        return tok, dict(fast, eos_token="<|endoftext|>")

    def punct(behavior):
        def make():
            tok = Tokenizer(models.BPE())
            tok.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Punctuation(behavior=behavior),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
            tok.decoder = decoders.ByteLevel()
            tok.train_from_iterator(t, bl_trainer(700, ["<|endoftext|>"]))
            return tok, dict(fast, eos_token="<|endoftext|>")
        return make

    def granite():
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True,
                                                     use_regex=True)
        tok.decoder = decoders.ByteLevel()
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        tok.train_from_iterator(t, bl_trainer(1100, GRANITE_SPECIAL))
        return tok, dict(fast, bos_token="<|end_of_text|>", eos_token="<|end_of_text|>")

    def olmo2():
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PAT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        tok.train_from_iterator(t, bl_trainer(1200))
        tok.add_special_tokens(["<|endoftext|>", "<|pad|>"])
        return tok, dict(fast, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                         pad_token="<|pad|>")

    def smollm3():
        tok, _ = llama3()
        tok.add_special_tokens(["<|im_start|>", "<|im_end|>"])
        return tok, dict(fast, bos_token="<|begin_of_text|>", eos_token="<|im_end|>",
                         pad_token="<|im_end|>")

    families = {"gpt2": gpt2, "llama3": llama3, "qwen2": qwen2, "llama2": llama2,
                "mistral": mistral, "digits": digits, "mixed": mixed, "gemma": gemma,
                "phi3": phi3, "falcon": falcon, "granite": granite, "olmo2": olmo2,
                "smollm3": smollm3}
    for b in ("isolated", "removed", "merged_with_previous", "merged_with_next"):
        families["punct_" + b] = punct(b)
    return families


def split_special(tok, text):
    """Ids with special-token spellings kept as text (transformers' split_special_tokens=True):
    what flashserve's Tokenizer::encode does. None where this tokenizers version lacks it."""
    if not hasattr(tok, "encode_special_tokens"):
        return None
    tok.encode_special_tokens = True
    try:
        return tok.encode(text, add_special_tokens=False).ids
    finally:
        tok.encode_special_tokens = False


def chat_cases(tok, family):
    """Each chat prompt with its messages' byte ranges and HF's ids for the whole text."""
    out = []
    for segments in CHAT_CASES.get(family, []):
        text, literal, at = "", [], 0
        for seg, is_message in segments:
            n = len(seg.encode("utf-8"))
            if is_message:
                literal.append([at, at + n])
            text += seg
            at += n
        out.append({"text": text, "literal": literal,
                    "ids": tok.encode(text, add_special_tokens=False).ids})
    return out


def references(tok, folder, corpus, family):
    import tokenizers
    ref = {"tokenizers_version": tokenizers.__version__,
           "vocab_size": tok.get_vocab_size(with_added_tokens=True), "lines": []}
    try:
        import transformers
        from transformers import AutoTokenizer
        hf = AutoTokenizer.from_pretrained(folder)
        ref["transformers_version"] = transformers.__version__
        ref["transformers_class"] = type(hf).__name__
        ref["transformers_len"] = len(hf)
        ref["transformers_bos_id"] = hf.bos_token_id
        ref["transformers_eos_id"] = hf.eos_token_id
    except Exception:  # noqa: BLE001 - recorded, not fatal
        hf = None
        ref["transformers_error"] = traceback.format_exc()
    for text in corpus + EXTRA_LINES.get(family, []):
        plain = tok.encode(text, add_special_tokens=False).ids
        special = tok.encode(text, add_special_tokens=True).ids
        row = {"text": text, "ids": plain, "ids_special": special,
               "ids_split_special": split_special(tok, text),
               "decode": tok.decode(special, skip_special_tokens=True),
               "decode_keep": tok.decode(special, skip_special_tokens=False)}
        if hf is not None:
            row["transformers_ids"] = hf(text)["input_ids"]
        ref["lines"].append(row)
    ref["chat"] = chat_cases(tok, family)
    rng = random.Random(99)
    n = tok.get_vocab_size(with_added_tokens=True)
    ref["random_decode"] = []
    for _ in range(300):
        ids = [rng.randrange(n) if rng.random() < 0.6 else rng.randrange(min(n, 300))
               for _ in range(rng.randint(1, 16))]
        ref["random_decode"].append({"ids": ids, "text": tok.decode(ids, skip_special_tokens=True)})
    return ref


def build(corpus_path, outdir, only=None):
    corpus = json.load(open(corpus_path, encoding="utf-8"))
    t = training_text(corpus)
    os.makedirs(outdir, exist_ok=True)
    errors = []
    builders = family_builders(t)
    unknown = sorted(set(only or []) - set(builders))
    if unknown:
        sys.exit("unknown families: " + ", ".join(unknown) + "; known: " + ", ".join(builders))
    for name, make in builders.items():
        if only and name not in only:
            continue
        try:
            tok, cfg = make()
            folder = os.path.join(outdir, name)
            os.makedirs(folder, exist_ok=True)
            tok.save(os.path.join(folder, "tokenizer.json"), pretty=False)
            with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
                json.dump(cfg, f, ensure_ascii=False, indent=1)
            ref = references(tok, folder, corpus, name)
            with open(os.path.join(folder, "reference.json"), "w", encoding="utf-8") as f:
                json.dump(ref, f, ensure_ascii=False)
            print(name, "ok: vocab", ref["vocab_size"], "transformers:",
                  ref.get("transformers_class", "error"))
        except Exception:  # noqa: BLE001 - one family's failure must not lose the others
            errors.append(name + "\n" + traceback.format_exc())
            print(name, "FAILED", file=sys.stderr)
            traceback.print_exc()
    with open(os.path.join(outdir, "errors.txt"), "w") as f:
        f.write("\n".join(errors))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "corpus":
        with open(sys.argv[2], "w", encoding="utf-8") as f:
            json.dump(make_corpus(), f, ensure_ascii=False, indent=0)
    elif len(sys.argv) in (4, 5) and sys.argv[1] == "build":
        build(sys.argv[2], sys.argv[3], sys.argv[4].split(",") if len(sys.argv) == 5 else None)
    else:
        sys.exit(__doc__)
