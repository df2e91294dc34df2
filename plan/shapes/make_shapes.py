#!/usr/bin/env python3
"""Write the shape files of `strata plan --shapes` (plan/shapes/*.json) from the
published model configurations (each file's "source"). A parameter is
{"name", "shape" (as the checkpoint stores it: PyTorch's (out, in) for Linear,
GPT-2's Conv1D (in, out)), "role" (strata_role: embedding, head, matrix,
vector), "layer" (0 the embeddings, l + 1 block l, L + 1 the final norm and the
head)}. Run from anywhere: python3 plan/shapes/make_shapes.py."""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def gpt2(name, n_layer, d, source):
    # GPT-2: config.json n_layer, n_embd, n_head, vocab_size 50257, n_positions
    # 1024; Conv1D weights are (in, out); lm_head is tied to wte (no tensor).
    p = [("wte", [50257, d], "embedding", 0), ("wpe", [1024, d], "embedding", 0)]
    for l in range(n_layer):
        h = f"h.{l}."
        p += [(h + "ln_1.weight", [d], "vector", l + 1), (h + "ln_1.bias", [d], "vector", l + 1),
              (h + "attn.c_attn.weight", [d, 3 * d], "matrix", l + 1),
              (h + "attn.c_attn.bias", [3 * d], "vector", l + 1),
              (h + "attn.c_proj.weight", [d, d], "matrix", l + 1),
              (h + "attn.c_proj.bias", [d], "vector", l + 1),
              (h + "ln_2.weight", [d], "vector", l + 1), (h + "ln_2.bias", [d], "vector", l + 1),
              (h + "mlp.c_fc.weight", [d, 4 * d], "matrix", l + 1),
              (h + "mlp.c_fc.bias", [4 * d], "vector", l + 1),
              (h + "mlp.c_proj.weight", [4 * d, d], "matrix", l + 1),
              (h + "mlp.c_proj.bias", [d], "vector", l + 1)]
    p += [("ln_f.weight", [d], "vector", n_layer + 1), ("ln_f.bias", [d], "vector", n_layer + 1)]
    return name, source, p


def llama(name, n_layer, d, ffn, n_heads, n_kv, vocab, tied, norms, source):
    # Llama / OLMo (HF layout): q, k, v, o projections (k and v of n_kv heads),
    # SwiGLU gate/up/down, RMSNorm (OLMo-1/7B: non-parametric LayerNorm, no
    # tensor), untied lm_head unless tie_word_embeddings.
    hd = d // n_heads
    p = [("model.embed_tokens.weight", [vocab, d], "embedding", 0)]
    for l in range(n_layer):
        h = f"model.layers.{l}."
        p += [(h + "self_attn.q_proj.weight", [d, d], "matrix", l + 1),
              (h + "self_attn.k_proj.weight", [n_kv * hd, d], "matrix", l + 1),
              (h + "self_attn.v_proj.weight", [n_kv * hd, d], "matrix", l + 1),
              (h + "self_attn.o_proj.weight", [d, d], "matrix", l + 1),
              (h + "mlp.gate_proj.weight", [ffn, d], "matrix", l + 1),
              (h + "mlp.up_proj.weight", [ffn, d], "matrix", l + 1),
              (h + "mlp.down_proj.weight", [d, ffn], "matrix", l + 1)]
        if norms:
            p += [(h + "input_layernorm.weight", [d], "vector", l + 1),
                  (h + "post_attention_layernorm.weight", [d], "vector", l + 1)]
    if norms:
        p.append(("model.norm.weight", [d], "vector", n_layer + 1))
    if not tied:
        p.append(("lm_head.weight", [vocab, d], "head", n_layer + 1))
    return name, source, p


MODELS = [
    gpt2("gpt2-124m", 12, 768, "https://huggingface.co/openai-community/gpt2/blob/main/config.json"),
    gpt2("gpt2-355m", 24, 1024,
         "https://huggingface.co/openai-community/gpt2-medium/blob/main/config.json"),
    gpt2("gpt2-774m", 36, 1280,
         "https://huggingface.co/openai-community/gpt2-large/blob/main/config.json"),
    gpt2("gpt2-1.5b", 48, 1600,
         "https://huggingface.co/openai-community/gpt2-xl/blob/main/config.json"),
    # Llama 3.2 1B: hidden 2048, intermediate 8192, 16 layers, 32 heads, 8 KV
    # heads, vocab 128256, tie_word_embeddings true
    llama("llama-1b", 16, 2048, 8192, 32, 8, 128256, True, True,
          "https://huggingface.co/meta-llama/Llama-3.2-1B/blob/main/config.json"),
    # Llama 2 7B: hidden 4096, intermediate 11008, 32 layers, 32 heads (no
    # GQA), vocab 32000, untied head
    llama("llama-7b", 32, 4096, 11008, 32, 32, 32000, False, True,
          "https://huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json"),
    # OLMo 1B: d_model 2048, 16 layers, 16 heads, SwiGLU hidden 8192 (mlp_ratio
    # 8 fused), embedding_size 50304, weight tying, non-parametric layer norm
    llama("olmo-1b", 16, 2048, 8192, 16, 16, 50304, True, False,
          "https://huggingface.co/allenai/OLMo-1B-hf/blob/main/config.json"),
    # OLMo 7B: d_model 4096, 32 layers, 32 heads, SwiGLU hidden 11008,
    # embedding_size 50304, untied head, non-parametric layer norm
    llama("olmo-7b", 32, 4096, 11008, 32, 32, 50304, False, False,
          "https://huggingface.co/allenai/OLMo-7B-hf/blob/main/config.json"),
]

for name, source, params in MODELS:
    total = 0
    for _, shape, _, _ in params:
        n = 1
        for s in shape:
            n *= s
        total += n
    lines = ",\n".join("  " + json.dumps({"name": n, "shape": s, "role": r, "layer": l})
                       for n, s, r, l in params)
    with open(os.path.join(HERE, name + ".json"), "w") as f:
        f.write('{"model": "%s", "source": "%s", "parameters": %d,\n"params": [\n%s\n]}\n'
                % (name, source, total, lines))
    print(f"{name}: {len(params)} tensors, {total / 1e6:.1f}M parameters")
