#!/usr/bin/python3
"""Writes tests/server/data/chat_tok.model: a tiny SentencePiece model (byte fallback, so any text
encodes) whose user-defined pieces <|im_start|> and <|im_end|> are ChatML's special tokens. The chat
tests use it (with random weights of the same vocabulary) to check that special-token text the
template writes becomes one id while the same text inside a message stays characters.
Run: /usr/bin/python3 tests/server/make_chat_tokenizer.py   (needs python3-sentencepiece)"""
import io
import os

import sentencepiece as spm

WORDS = ("once upon a time there was a little cat who liked to play in the sun with her friend "
         "the dog they ran to the park and found a big red ball the user said hello and the "
         "assistant answered with a story about a happy bird that could sing").split()


def corpus():
    # Deterministic sentences from the word list, so the model is the same on every run.
    lines = []
    for i in range(400):
        n = 5 + i % 9
        lines.append(" ".join(WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(n)))
    return lines


def main():
    out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
    os.makedirs(out_dir, exist_ok=True)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus()), model_writer=model, model_type="unigram",
        vocab_size=320, hard_vocab_limit=False, byte_fallback=True, character_coverage=1.0,
        user_defined_symbols=["<|im_start|>", "<|im_end|>"], num_threads=1, minloglevel=2,
        normalization_rule_name="identity")  # no NFKC table: keeps the file a few KB
    with open(os.path.join(out_dir, "chat_tok.model"), "wb") as f:
        f.write(model.getvalue())
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    print("wrote", os.path.join(out_dir, "chat_tok.model"), "pieces:", sp.get_piece_size(),
          "<|im_start|>:", sp.piece_to_id("<|im_start|>"), "<|im_end|>:", sp.piece_to_id("<|im_end|>"))


if __name__ == "__main__":
    main()
