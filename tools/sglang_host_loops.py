"""Times, on this machine's CPython, the per-request and per-accepted-token Python loops of SGLang v0.4.4.post2's
EAGLE step (overlap scheduler off), with stand-in objects: the loop bodies are copied from the release's code
(managers/schedule_batch.py Req.check_finished, ScheduleBatch.filter_batch / get_model_worker_batch,
speculative/eagle_utils.py EagleVerifyInput.verify and EagleDraftInput.prepare_extend_after_decode,
managers/scheduler_output_processor_mixin.py process_batch_result_decode / stream_output_generation). The tokenizer
stands in for a HuggingFace fast tokenizer: its eos_token_id is a property that converts the eos token's text through
two method calls and a dictionary (transformers' PreTrainedTokenizerBase.eos_token_id -> convert_tokens_to_ids).
GPU tensors' .tolist() are Python lists here (their host-side conversion is timed apart, per element).

    python tools/sglang_host_loops.py     # the profile's per-element host times (CPU time: best of 9 a run, 5 runs)

The profiles take the fastest run (the least disturbed by other processes on a shared machine: a serving host's
scheduler process has its core to itself). transformers (and tokenizers) are needed for the real tokenizer; without
them a stand-in runs, which says so.

Not part of the package: its figures are written into engines/sglang/0.4.4.post2.yaml and 0.5.9.yaml with this
file named as their source.
"""
from __future__ import annotations

import time


class Tokenizer:
    def __init__(self):
        self._eos_token = "</s>"
        self._vocab = {"</s>": 2, "<unk>": 0}
        self.additional_stop_token_ids = {1}

    def decode(self, ids):  # no stand-in for the Rust decoder: a join of the ids' texts
        return "".join(str(i) for i in ids)

    @property
    def eos_token(self):
        return None if self._eos_token is None else str(self._eos_token)

    def _convert_token_to_id_with_added_voc(self, token):
        index = self._vocab.get(token)
        return self.unk_token_id if index is None else index

    def convert_tokens_to_ids(self, tokens):
        if tokens is None:
            return None
        if isinstance(tokens, str):
            return self._convert_token_to_id_with_added_voc(tokens)
        return [self._convert_token_to_id_with_added_voc(t) for t in tokens]

    @property
    def eos_token_id(self):
        return None if self._eos_token is None else self.convert_tokens_to_ids(self.eos_token)


def hf_tokenizer():
    """A HuggingFace fast tokenizer (transformers' PreTrainedTokenizerFast over a byte-level BPE trained here on a
    few sentences, Llama-3's tokenizer kind), or None where transformers is not installed."""
    try:
        from tokenizers import Tokenizer as RustTokenizer, decoders, models, pre_tokenizers, trainers
        from transformers import PreTrainedTokenizerFast
    except ImportError:
        return None
    rust = RustTokenizer(models.BPE())
    rust.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    rust.decoder = decoders.ByteLevel()
    text = ["The quick brown fox jumps over the lazy dog, again and again."] * 50
    rust.train_from_iterator(text, trainers.BpeTrainer(vocab_size=500, special_tokens=["<|eot_id|>", "</s>"]))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=rust, eos_token="</s>", clean_up_tokenization_spaces=True)
    # SGLang's hf_transformers_utils.attach_additional_stop_token_ids: Llama-3.1's <|eom_id|>, a set of one
    tokenizer.additional_stop_token_ids = {tokenizer.convert_tokens_to_ids("<|eot_id|>")}
    return tokenizer


class SamplingParams:
    max_new_tokens = 1 << 30
    ignore_eos = False
    stop_token_ids = set()
    stop_strs = []
    stop_str_max_len = 1
    skip_special_tokens = True
    spaces_between_special_tokens = True
    no_stop_trim = False


class Req:
    def __init__(self, tokenizer):
        self.output_ids, self.origin_input_ids = [1], [1] * 300
        self.sampling_params, self.tokenizer, self.eos_token_ids = SamplingParams(), tokenizer, {2}
        self.finished_reason, self.to_abort, self.is_retracted = None, False, False
        self.return_logprob, self.return_hidden_states, self.grammar, self.stream = False, False, None, False
        self.spec_verify_ct, self.multimodal_inputs, self.lora_path = 0, None, None
        self.decoded_text = ""

    def finished(self):
        return self.finished_reason is not None

    def check_finished(self):  # schedule_batch.py Req.check_finished
        if self.finished():
            return
        if self.to_abort:
            return
        if len(self.output_ids) >= self.sampling_params.max_new_tokens:
            return
        last_token_id = self.output_ids[-1]
        if not self.sampling_params.ignore_eos:
            matched_eos = False
            if self.sampling_params.stop_token_ids:
                matched_eos = last_token_id in self.sampling_params.stop_token_ids
            if self.eos_token_ids:
                matched_eos |= last_token_id in self.eos_token_ids
            if self.tokenizer is not None:
                matched_eos |= last_token_id == self.tokenizer.eos_token_id
                if self.tokenizer.additional_stop_token_ids:
                    matched_eos |= last_token_id in self.tokenizer.additional_stop_token_ids
            if matched_eos:
                return
        if len(self.sampling_params.stop_strs) > 0:
            tail_str = self.tokenizer.decode(self.output_ids[-(self.sampling_params.stop_str_max_len + 1):])
            for stop_str in self.sampling_params.stop_strs:
                if stop_str in tail_str or stop_str in self.decoded_text:
                    return


def verify_loop(reqs, accept_index_cpu, predict_cpu):  # eagle_utils.py EagleVerifyInput.verify
    new_accept_index, unfinished_index = [], []
    for i, (req, accept_index_row) in enumerate(zip(reqs, accept_index_cpu)):
        new_accept_index_ = []
        for j, idx in enumerate(accept_index_row):
            if idx == -1:
                break
            id = predict_cpu[idx]
            req.output_ids.append(id)
            req.check_finished()
            if req.finished():
                break
            else:
                new_accept_index_.append(idx)
        if not req.finished():
            new_accept_index.extend(new_accept_index_)
            unfinished_index.append(i)
        req.spec_verify_ct += 1
    return new_accept_index


def per_request_rest(reqs, accept_length_cpu, seq_lens_cpu):
    """The other per-request loops of one EAGLE step (overlap off)."""
    # scheduler.update_running_batch -> ScheduleBatch.filter_batch
    keep = [i for i in range(len(reqs)) if not reqs[i].finished() and reqs[i] is not None]
    # ScheduleBatch.get_model_worker_batch, three times (draft, verify, draft extend)
    for _ in range(3):
        _mm = [r.multimodal_inputs for r in reqs]
        _lora = [r.lora_path for r in reqs]
    # EagleDraftInput.prepare_extend_after_decode
    extend_lens = [x + 1 for x in accept_length_cpu]
    _total = sum(extend_lens) + sum(seq_lens_cpu)
    # forward_batch_speculative_generation's return
    _accepted = sum(accept_length_cpu)
    # process_batch_result_decode (speculative branch)
    for i, (req, _next) in enumerate(zip(reqs, accept_length_cpu)):
        if req.is_retracted:
            continue
        req.check_finished()
        if req.finished():
            pass
        if req.return_logprob and False:
            pass
        if req.return_hidden_states:
            pass
        if req.grammar is not None and False:
            pass
    # stream_output_generation: the per-request condition (non-streaming requests report every 50 tokens)
    rids = []
    for req in reqs:
        if req is None:
            continue
        if req.finished() or (req.stream and len(req.output_ids) % 1 == 0) or (
                not req.stream and len(req.output_ids) % 50 == 0):
            rids.append(req)
    return keep, _total


def best_us(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(9):
        start = time.process_time()
        for _ in range(repeats):
            fn()
        best = min(best, (time.process_time() - start) / repeats * 1e6)
    return best


def loop_us(tokenizer, stop_strs, accepted: int, batch: int, steps: int = 3) -> float:
    """The verify loop's time per request at `accepted` emitted tokens a request."""
    params = SamplingParams()
    params.stop_strs = stop_strs
    reqs = [Req(tokenizer) for _ in range(batch)]
    for r in reqs:
        r.sampling_params = params
        r.output_ids = [5, 6]
    predict = [7] * (batch * (steps + 1))
    rows = [list(range(i * (steps + 1), i * (steps + 1) + accepted)) + [-1] * (steps + 1 - accepted)
            for i in range(batch)]

    def reset():
        for r in reqs:
            del r.output_ids[2:]

    def verify():
        reset()
        verify_loop(reqs, rows, predict)

    return (best_us(verify, 200) - best_us(reset, 200)) / batch


def figures(tokenizer, batch: int = 32, steps: int = 3) -> dict:
    """The profile's per-element host times (us)."""
    import numpy as np

    check = {}
    for label, stops in (("none", []), ("one", ["<|eot_id|>"])):
        one = Req(tokenizer)
        one.sampling_params = SamplingParams()
        one.sampling_params.stop_strs = stops
        one.output_ids = [5, 6]
        check[label] = best_us(one.check_finished, 2000)
    token = (loop_us(tokenizer, [], steps + 1, batch) - loop_us(tokenizer, [], 1, batch)) / steps
    request_verify = loop_us(tokenizer, [], 1, batch) - token
    reqs = [Req(tokenizer) for _ in range(batch)]
    for r in reqs:
        r.sampling_params = SamplingParams()
    rest = best_us(lambda: per_request_rest(reqs, [2] * batch, [400] * batch), 200) / batch
    array = np.zeros((batch, steps + 1), dtype=np.int32)
    element = best_us(array.tolist, 2000) / array.size
    return {"per_request_us": request_verify + rest, "per_accepted_token_us": token,
            "stop_check_us": check["one"] - check["none"], "per_draft_token_us": 2 * element,
            "check_finished_us": check["none"]}


def main(repeats: int = 5) -> None:
    import platform
    import statistics

    tokenizer = hf_tokenizer()
    print(f"CPython {platform.python_version()} on {platform.machine()}; tokenizer: "
          + ("transformers PreTrainedTokenizerFast" if tokenizer else "a stand-in (transformers not installed)"))
    runs = [figures(tokenizer or Tokenizer()) for _ in range(repeats)]
    for key in runs[0]:
        values = sorted(run[key] for run in runs)
        print(f"{key}: fastest {values[0]:.2f} us, median {statistics.median(values):.2f} (runs up to {values[-1]:.2f})")


if __name__ == "__main__":
    main()
