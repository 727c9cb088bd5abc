"""Spec-Bench's (hemingkx/Spec-Bench, commit fd2c1cd) decoding loops as tools/specbench_python_host.py runs them:
each runner builds tiny random-weight Vicuna-shaped models (the tool's vocabulary and width) and returns
(run(max_new) -> steps, the modules whose forwards are model passes). Spec-Bench's code is imported from the folder
the tool is given (sys.path), never copied here.
"""
from __future__ import annotations

import sys
import types

import torch

LAYERS, VOCAB, HIDDEN = 2, 32000, 64  # the target's layers, the vocabulary, the width (the tool's flags)


def add_flags(parser, steps: int, methods: str) -> None:
    """The flags the Spec-Bench tools share: Spec-Bench's folder, the steps run, the tiny models' vocabulary and width,
    the methods."""
    parser.add_argument("--specbench", default="/tmp/specbench")
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--methods", default=methods)


def configure(args, layers: int | None = None) -> None:
    """Spec-Bench's folder on the path, one torch thread, the tiny models' sizes as the tool's flags say."""
    global LAYERS, VOCAB, HIDDEN
    sys.path.insert(0, args.specbench)
    torch.set_num_threads(1)
    VOCAB, HIDDEN = args.vocab, args.hidden
    if layers is not None:
        LAYERS = layers


def eos() -> int:
    """The last id: a row of zeros in every lm_head, so random logits never pick it and no run stops early."""
    return VOCAB - 1


def vicuna_config(layers: int | None = None, hidden: int | None = None, **extra):
    from transformers import LlamaConfig
    hidden = hidden or HIDDEN
    return LlamaConfig(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers or LAYERS,
                       num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=2048,
                       bos_token_id=1, eos_token_id=eos(), pad_token_id=0, **extra)


def prompt(length: int = 64, seed: int = 0):
    """A prompt that repeats itself (PLD and lookahead find n-grams in it)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB - 1, (length // 4,), generator=g).repeat(4)[None]


def _no_eos(model):
    with torch.no_grad():
        model.lm_head.weight[eos()] = 0.0
    return model.eval()


def hf_llama(**extra):
    from transformers import LlamaForCausalLM
    torch.manual_seed(0)
    return _no_eos(LlamaForCausalLM(vicuna_config(**extra)))


def baseline():
    """evaluation/inference_baseline.py: model.generate(greedy), transformers' greedy_search."""
    model = hf_llama()
    ids = prompt()

    def run(max_new):
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new, do_sample=False,
                             eos_token_id=eos(), pad_token_id=0)
        return out.shape[1] - ids.shape[1]
    return run, [model]


def pld():
    """evaluation/inference_pld.py: model/pld/pld.py greedy_search_pld (window 3, 10 candidate tokens)."""
    from transformers import MaxLengthCriteria, StoppingCriteriaList
    from model.pld.pld import greedy_search_pld
    model = hf_llama()
    model.greedy_search_pld = greedy_search_pld.__get__(model, type(model))
    ids = prompt()

    def run(max_new):
        out, idx, accept = model.greedy_search_pld(
            ids, attention_mask=torch.ones_like(ids),
            stopping_criteria=StoppingCriteriaList([MaxLengthCriteria(max_length=ids.shape[1] + max_new)]),
            draft_matching_window_size=3, draft_num_candidate_tokens=10, use_cache=True, pad_token_id=0,
            eos_token_id=eos(), return_dict_in_generate=False)
        return len(accept)
    return run, [model]


def sps():
    """evaluation/inference_sps.py: GenerationMixin.assisted_decoding = model/sps/decoding.py's, a Vicuna-68M-shaped
    assistant (2 layers) through model.generate(assistant_model=...)."""
    from transformers import GenerationMixin
    from model.sps.decoding import assisted_decoding
    GenerationMixin.assisted_decoding = assisted_decoding
    model, drafter = hf_llama(), hf_llama(layers=2, hidden=max(HIDDEN // 2, 8))
    ids = prompt()

    def run(max_new):
        model.generation_config.max_new_tokens = max_new
        model.generation_config.eos_token_id = eos()
        model.generation_config.pad_token_id = 0
        out, idx, accept = model.generate(ids, attention_mask=torch.ones_like(ids),
                                          generation_config=model.generation_config, assistant_model=drafter,
                                          do_sample=False, temperature=0.0)
        return len(accept)
    return run, [model, drafter]


def _ea(package: str, total_token=60, depth=5, top_k=10, layer=True, draft_vocab=None):
    """model/<package>/ea_model.py EaModel around a KV Llama and a one-layer head (Spec-Bench's defaults)."""
    import importlib
    ea = importlib.import_module(f"model.{package}.ea_model")
    cnets = importlib.import_module(f"model.{package}.cnets")
    configs = importlib.import_module(f"model.{package}.configs")
    kv = importlib.import_module(f"model.{package}.modeling_llama_kv")
    torch.manual_seed(0)
    base = _no_eos(kv.LlamaForCausalLM(vicuna_config()))
    cfg = configs.EConfig(**{**vicuna_config().to_dict(), "num_hidden_layers": 1,
                             **({"draft_vocab_size": draft_vocab} if draft_vocab else {})})
    m = ea.EaModel.__new__(ea.EaModel)
    torch.nn.Module.__init__(m)
    m.base_model, m.config = base, base.config
    m.hidden_size, m.vocab_size, m.use_eagle3 = HIDDEN, VOCAB, package == "eagle3"
    m.tokenizer = types.SimpleNamespace(eos_token_id=eos())
    m.ea_layer = cnets.Model(cfg, bias=True, total_tokens=total_token, depth=depth, top_k=top_k,
                             threshold=1.0) if layer else cnets.Model(cfg, bias=True)
    m.ea_layer.diff_device = False
    m.ea_layer.eval()
    if hasattr(m.ea_layer, "init_tree"):
        m.ea_layer.init_tree()
    ids = prompt()

    def run(max_new):
        out = m.eagenerate(ids, temperature=0.0, max_new_tokens=max_new, log=True)
        return out[2]
    return run, [base.model, base.lm_head, m.ea_layer], m


def eagle2():
    """evaluation/inference_eagle2.py: model/eagle2 (total_token 60, depth 5, top_k 10)."""
    return _ea("eagle2")[:2]


def eagle2_30():
    """model/eagle2 with half the tree (total_token 30): how its Python grows with the draft tokens."""
    return _ea("eagle2", total_token=30)[:2]


def eagle():
    """evaluation/inference_eagle.py ea_forward: model/eagle on its tree buffers (model/eagle/choices.py
    mc_sim_7b_63, the script's default)."""
    from evaluation.inference_eagle import ea_forward
    from model.eagle.choices import mc_sim_7b_63
    _, modules, m = _ea("eagle", layer=False)
    ids = prompt()

    def run(max_new):
        return ea_forward(types.SimpleNamespace(input_ids=ids), m, m.tokenizer, max_new, tree_choices=mc_sim_7b_63)[2]
    return run, modules


def medusa():
    """evaluation/inference_medusa.py medusa_forward: model/medusa, 4 heads of one ResBlock, mc_sim_7b_63."""
    from evaluation.inference_medusa import medusa_forward
    from model.medusa.medusa_choices import mc_sim_7b_63
    from model.medusa import medusa_model, modeling_llama_kv
    torch.manual_seed(0)
    base = _no_eos(modeling_llama_kv.LlamaForCausalLM(vicuna_config()))
    m = medusa_model.MedusaModel.__new__(medusa_model.MedusaModel)
    torch.nn.Module.__init__(m)
    m.base_model, m.config, m.hidden_size, m.vocab_size, m.medusa, m.medusa_num_layers = base, base.config, HIDDEN, VOCAB, 4, 1
    m.medusa_head = torch.nn.ModuleList([torch.nn.Sequential(medusa_model.ResBlock(HIDDEN), torch.nn.Linear(HIDDEN, VOCAB, bias=False))
                                         for _ in range(4)]).eval()
    tokenizer = types.SimpleNamespace(eos_token_id=eos())
    ids = prompt()

    def run(max_new):
        return medusa_forward(types.SimpleNamespace(input_ids=ids), m, tokenizer, max_new, medusa_choices=mc_sim_7b_63,
                              temperature=0.0)[2]
    return run, [base.model, base.lm_head, m.medusa_head]


RUNNERS = {"baseline": baseline, "pld": pld, "sps": sps, "eagle2": eagle2, "eagle2_30": eagle2_30, "eagle": eagle, "medusa": medusa}


def sps_constant(k: int):
    """sps with the assistant's schedule constant at k drafts a round (generation_config.num_assistant_tokens,
    num_assistant_tokens_schedule "constant"): how a round's host work grows with its drafts."""
    def build():
        run, (model, drafter) = sps()
        drafter.generation_config.num_assistant_tokens = k
        drafter.generation_config.num_assistant_tokens_schedule = "constant"
        return run, [model, drafter]
    return build


def eagle3():
    """evaluation/inference_eagle3.py: model/eagle3 EaModel.eagenerate (total_token 60, depth 5, top_k 10), the head's
    fc over three of the target's hidden states (8 target layers: modeling_llama_kv.py takes layers 2, 4 and 5) and
    a draft vocabulary of half the target's (d2t)."""
    global LAYERS
    layers, LAYERS = LAYERS, 8
    try:
        return _ea("eagle3", draft_vocab=VOCAB // 2)[:2]
    finally:
        LAYERS = layers


def hydra():
    """evaluation/inference_hydra.py hydra_forward: model/hydra, 4 grounded MLP heads of one ResBlock (the mlp head
    architecture), model/hydra/hydra_choices.py mc_sim_7b_63."""
    from evaluation.inference_hydra import hydra_forward
    from model.hydra.hydra_choices import mc_sim_7b_63
    from model.hydra import hydra_model, modeling_llama_kv
    from model.hydra.hydra_heads.mlp_head import HydraMLP
    torch.manual_seed(0)
    base = _no_eos(modeling_llama_kv.LlamaForCausalLM(vicuna_config()))
    m = hydra_model.HydraModel.__new__(hydra_model.HydraModel)
    torch.nn.Module.__init__(m)
    m.base_model, m.config, m.hidden_size, m.vocab_size, m.orig_lm_head = base, base.config, HIDDEN, VOCAB, base.lm_head
    m.hydra, m.hydra_num_layers, m.hydra_head_arch, m.hidden_state_offset, m.dropout_rate = 4, 1, "mlp", 0, 0.0
    m.grounded_heads = True
    m.hydra_head = HydraMLP(hydra_num_layers=1, hydra_num_heads=4, grounded_heads=True,
                            input_embed_fn=base.model.embed_tokens, base_config=base.config,
                            lm_head_init_weight=base.lm_head.weight.data).eval()
    m.tokenizer = types.SimpleNamespace(eos_token_id=eos(), pad_token_id=0)
    ids = prompt()

    def run(max_new):
        return hydra_forward(types.SimpleNamespace(input_ids=ids), m, m.tokenizer, max_new, hydra_choices=mc_sim_7b_63,
                             temperature=0.0)[2]
    return run, [base.model, base.lm_head, m.hydra_head]


def lookahead():
    """evaluation/inference_lookahead.py with USE_LADE=1 (eval.sh): model/lade's augment_all and config_lade (level 5,
    window 7, guess 7, DEBUG 0, USE_FLASH 0), model.generate through greedy_search_proxy's
    jacobi_greedy_search_multilevel; transformers' own greedy_search is put back after each request (the other
    runners share the process)."""
    import os
    from transformers import GenerationMixin
    from model.lade.utils import augment_llama, config_lade
    from model.lade.decoding import FUNC_MAP, greedy_search_proxy
    augment_llama()
    config_lade(LEVEL=5, WINDOW_SIZE=7, GUESS_SET_SIZE=7, DEBUG=0, USE_FLASH=0)
    model = hf_llama()
    ids = prompt()
    plain = GenerationMixin.greedy_search

    def run(max_new):
        FUNC_MAP["greedy_search"], GenerationMixin.greedy_search = plain, greedy_search_proxy
        os.environ["USE_LADE"] = "1"
        try:
            out, idx, accept = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new,
                                              do_sample=False, eos_token_id=eos(), pad_token_id=0)
        finally:
            GenerationMixin.greedy_search = plain
            os.environ.pop("USE_LADE")
        return len(accept)
    return run, [model]


RUNNERS.update({"sps_k1": sps_constant(1), "sps_k3": sps_constant(3), "eagle3": eagle3, "hydra": hydra,
                "lookahead": lookahead, "eagle2_depth3": lambda: _ea("eagle2", depth=3)[:2]})
