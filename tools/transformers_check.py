"""A transformers model that builds float attention masks, run through
attncore.torch, against the same model on torch's own SDPA.

    python tools/transformers_check.py

Needs torch and a transformers release whose SDPA path builds the additive
float masks (torch.finfo(dtype).min where a key is hidden), e.g. 4.40; install
them with `pip install -e .[torch] "transformers==4.40.2"`.  A small Llama
(GQA 4/2) and Mistral (one kv head, a sliding window of 16), random weights from their configs (nothing downloaded),
a batch with left padding so the masks are not plain causal: the logits and
the gradients of every parameter under both SDPAs, and what masks the model
handed to SDPA.  Llama in float64 (differences within 1e-10 of the largest
value), Mistral in float32 (1e-5: that release builds its mask in float32).
Exit status 1 if any differs by more.
"""

from __future__ import annotations

import sys

import torch
import transformers

import attncore.torch as act

ORIGINAL = torch.nn.functional.scaled_dot_product_attention


def run(model, ids, mask, sdpa):
    """Logits and gradients of every parameter, with `sdpa` as torch's SDPA."""
    seen = []

    def spy(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
        seen.append("none" if attn_mask is None else
                    f"{attn_mask.dtype} {tuple(attn_mask.shape)} min {attn_mask.min().item():.3g}")
        return sdpa(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                    scale=scale, **kw)

    torch.nn.functional.scaled_dot_product_attention = spy
    try:
        model.zero_grad()
        logits = model(ids, attention_mask=mask).logits
        (logits * torch.linspace(-1, 1, logits.shape[-1], dtype=logits.dtype)).sum().backward()
    finally:
        torch.nn.functional.scaled_dot_product_attention = ORIGINAL
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), grads, sorted(set(seen))


def check(name, model, dtype=torch.float64, tol=1e-10) -> bool:
    torch.manual_seed(1)
    ids = torch.randint(0, model.config.vocab_size, (3, 48))
    mask = torch.ones(3, 48, dtype=torch.long)
    mask[1, :9] = 0  # left padding
    mask[2, :30] = 0
    model = model.to(dtype).eval()
    want, want_grads, masks = run(model, ids, mask, ORIGINAL)
    got, got_grads, _ = run(model, ids, mask, act.scaled_dot_product_attention)
    err = (got - want).abs().max().item()
    gerr = max((got_grads[k] - want_grads[k]).abs().max().item() for k in want_grads)
    scale = max(want.abs().max().item(), max(g.abs().max().item() for g in want_grads.values()))
    ok = err < tol * scale and gerr < tol * scale and set(got_grads) == set(want_grads)
    print(f"{name}: masks given to SDPA: {'; '.join(masks)}")
    print(f"{name}, {dtype}: max |logits difference| {err:.2e}, max |gradient difference| "
          f"{gerr:.2e} over {len(want_grads)} parameters (largest value {scale:.3g}): "
          f"{'ok' if ok else 'DIFFERS'}")
    return ok


def main() -> int:
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=500, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        attn_implementation="sdpa"))
    mistral = transformers.MistralForCausalLM(transformers.MistralConfig(
        vocab_size=500, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=128,
        sliding_window=16, attn_implementation="sdpa"))
    results = [check("Llama (GQA 4/2)", llama), check("Mistral (MQA, sliding window 16)", mistral, torch.float32, 1e-5)]
    # (transformers 4.40 builds Mistral's mask in float32 whatever the model's dtype)
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
