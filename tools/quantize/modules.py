"""Which tensors of a checkpoint are quantized, and the units of work they fall into.

Quantized: each layer's linear projections, dense and mixture-of-experts, as GPTQModel,
AutoAWQ, llm-compressor and Qwen's block-FP8 uploads quantize them:
  self_attn.{q,k,v,o}_proj
  mlp.{gate,up,down}_proj                          (dense MLPs)
  mlp.experts.E.{gate,up,down}_proj                (Qwen2-MoE, Qwen3-MoE routed experts)
  mlp.shared_expert.{gate,up,down}_proj            (Qwen2-MoE shared expert)
  mlp.shared_experts.{gate,up,down}_proj           (DeepSeek-style shared experts)
  block_sparse_moe.experts.E.{w1,w2,w3}            (Mixtral: w1 gate, w3 up, w2 down)
Never: the routers (mlp.gate, block_sparse_moe.gate), the shared expert's gate
(mlp.shared_expert_gate), norms, embeddings and lm_head: the routers and gates are small, and
their errors pick other experts; every upload of these models keeps them in bf16."""
import re

_LAYER = r"(?:^|\.)layers\.\d+\."
PROJECTION = re.compile(_LAYER + r"(?:self_attn\.[qkvo]_proj"
                        r"|mlp\.(?:(?:experts\.\d+|shared_experts?)\.)?(?:gate|up|down)_proj"
                        r"|block_sparse_moe\.experts\.\d+\.w[123])$")
# Experts stacked into one 3-D tensor per projection (transformers' fused layout,
# mlp.experts.gate_up_proj [experts, 2 x intermediate, hidden]): no format above stores them so.
FUSED_EXPERTS = re.compile(_LAYER + r"(?:mlp|block_sparse_moe)\.experts\.[a-z_]\w*$")
ROUTER = re.compile(_LAYER + r"(?:mlp\.gate|mlp\.shared_expert_gate|block_sparse_moe\.gate)$")

# Projections that read the same input share one act-order column order (GPTQ's Hessian).
_INPUT_GROUP = {"q_proj": "qkv", "k_proj": "qkv", "v_proj": "qkv", "gate_proj": "gate_up",
                "up_proj": "gate_up", "w1": "w13", "w3": "w13"}
_LEAF_ORDER = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
               "w1", "w3", "w2")


def natural_key(name):
    """Sort key putting layers.2 before layers.10."""
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", name)]


def is_ignored(module, ignore):
    """--ignore entries match a module by its full name or a dotted suffix."""
    return any(module == e or module.endswith("." + e) for e in ignore)


def input_group(module):
    """The name shared by the projections that read `module`'s input (q/k/v, gate/up, w1/w3)."""
    parent, _, leaf = module.rpartition(".")
    return parent + "." + _INPUT_GROUP.get(leaf, leaf)


def projections(refs, ignore):
    """{module: TensorRef of its 2-D weight} of the projections to quantize."""
    out = {}
    for name, ref in refs.items():
        module = name[:-len(".weight")]
        if (name.endswith(".weight") and PROJECTION.search(module) and len(ref.shape) == 2
                and not is_ignored(module, ignore)):
            out[module] = ref
    return out


def fused_experts(refs):
    """Names of 3-D tensors holding every expert of a layer at once."""
    return sorted((n for n, ref in refs.items() if len(ref.shape) == 3
                   and FUSED_EXPERTS.search(n[:-len(".weight")] if n.endswith(".weight") else n)),
                  key=natural_key)


def routers(refs):
    """Full names of the router and shared-expert-gate modules, in layer order."""
    found = [n[:-len(".weight")] for n in refs if n.endswith(".weight")
             and ROUTER.search(n[:-len(".weight")])]
    return sorted(found, key=natural_key)


def block_modules(quantized):
    """The quantized projections of the first layer, relative to it (attention's, then the
    MLP's, experts in order): GPTQ's modules_in_block_to_quantize."""
    split = [re.match(r"^(.*?layers\.(\d+)\.)(.*)$", m) for m in quantized]
    first = min((int(s.group(2)) for s in split if s), default=None)
    rel = [s.group(3) for s in split if s and int(s.group(2)) == first]

    def key(r):
        parent, _, leaf = r.rpartition(".")
        return (not parent.startswith("self_attn"), natural_key(parent),
                _LEAF_ORDER.index(leaf) if leaf in _LEAF_ORDER else len(_LEAF_ORDER))
    return sorted(rel, key=key)


def work_units(refs, quantized):
    """The units of work, in output order (layer by layer): ("quantize", [modules of one input
    group]) or ("copy", tensor name)."""
    groups = {}
    for module in quantized:
        groups.setdefault(input_group(module), []).append(module)
    units = [(natural_key(min(members)), ("quantize", sorted(members)))
             for members in groups.values()]
    units += [(natural_key(name), ("copy", name)) for name in refs
              if name[:-len(".weight")] not in quantized or not name.endswith(".weight")]
    return [u for _, u in sorted(units, key=lambda k: k[0])]
