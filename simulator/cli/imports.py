"""Bring your own world: a model card from a Hugging Face config.json, a topology from nvidia-smi, a scenario from an
engine's launch command. Each writes YAML for review (stdout, or -o FILE), every value with where it came from.
"""
from __future__ import annotations

import os
import sys

EXAMPLES = """
  specsim import model scenarios/models/hf/qwen3_32b/config.json -o qwen3_32b.yaml
  specsim import model deepseek_v3/config.json --draft-head deepseek_v3_eagle3/config.json
  specsim import topology topo.txt --query gpus.csv -o my_box.yaml     (nvidia-smi topo -m > topo.txt;
                                  nvidia-smi --query-gpu=name,memory.total --format=csv > gpus.csv)
  specsim import topology topo.txt --gpu "NVIDIA H100 80GB HBM3"
  specsim import command --topology nvlink8_h200 -- python -m sglang.launch_server --model-path \\
      deepseek-ai/DeepSeek-V3 --tp 8 --speculative-algorithm EAGLE --speculative-num-steps 3
"""


def configure(p) -> None:
    sub = p.add_subparsers(dest="what", metavar="WHAT", parser_class=type(p))
    sub.required = True
    m = sub.add_parser("model", help="a model card from a Hugging Face config.json")
    m.add_argument("config", help="config.json (hf_quant_config.json beside it is read too)")
    m.add_argument("--draft-head", metavar="CONFIG", help="an EAGLE-style draft head's config.json")
    m.add_argument("--name", help="the card's name (default: the config's folder)")
    t = sub.add_parser("topology", help="a topology from nvidia-smi topo -m")
    t.add_argument("topo", help="the output of `nvidia-smi topo -m`")
    t.add_argument("--gpu", help="the GPU's name as nvidia-smi gives it, e.g. \"NVIDIA H100 80GB HBM3\"")
    t.add_argument("--query", metavar="CSV", help="output of nvidia-smi --query-gpu=name,memory.total --format=csv")
    t.add_argument("--name", help="the topology's name (default: the file's stem)")
    c = sub.add_parser("command", help="a scenario from an SGLang or vLLM launch command (after --)")
    c.add_argument("--topology", help="the machine it runs on: a name or a path (default: chosen by GPU count)")
    c.add_argument("--name", help="the scenario's name (default: from the model and flags)")
    c.add_argument("--engine-version", metavar="V", help="the engine's release (default: its newest profile shipped)")
    c.add_argument("argv", nargs="+", help="the launch command, after --")
    for parser in (m, t, c):
        parser.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")


def _write(text: str, output: str | None) -> None:
    if output is None:
        sys.stdout.write(text)
        return
    from ..config.errors import ConfigError

    try:
        with open(output, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        raise ConfigError("command line", "--output", f"cannot write {output}: {exc.strerror}") from None


def main(args) -> int:
    from ..importers.writer import to_yaml

    if args.what == "model":
        from ..importers.hf_model import card_from_file, draft_head_from_file

        card, notes = card_from_file(args.config, name=args.name)
        if args.draft_head:
            card["draft_head"], notes["draft_head"] = draft_head_from_file(args.draft_head)
            from ..config.base import validate
            from ..config.model_card import ModelCard

            validate(ModelCard, card, args.draft_head)
        header = [f"Imported by `specsim import model` from {args.config}: each value's config.json field or rule is "
                  "beside it (docs/imports.md)."]
        if "_approximations" in notes:
            header.append("Not modelled: " + notes["_approximations"])
            print(f"note: {notes['_approximations']}", file=sys.stderr)
        _write(to_yaml(card, notes, header), args.output)
        return 0
    if args.what == "topology":
        from ..importers.machine import import_topology

        topology, header = import_topology(args.topo, args.gpu, args.query, args.name)
        _write(to_yaml(topology, None, header), args.output)
        return 0
    from ..importers.engine_command import import_command

    argv = [a for a in args.argv if a != "--"] if args.argv[:1] == ["--"] else args.argv
    scenario, header, unmodelled = import_command(argv, args.topology, args.name,
                                                  os.path.dirname(os.path.abspath(args.output)) if args.output else None,
                                                  args.engine_version)
    _write(to_yaml(scenario, None, header), args.output)
    for line in unmodelled:
        print(f"not modelled: {line}", file=sys.stderr)
    return 0
