"""hf_swap.py — a transformers DeepSeek-V3 or Qwen3-MoE model with its MoE blocks replaced by
mok.MoE in one call (mok.swap_hf_moe_blocks): the logits before and after, then a few training
steps through the swapped model. Without --model it builds a tiny random model of the style from
transformers' own classes, so it runs anywhere; --model loads a checkpoint (a local folder or a
hub name) with AutoModelForCausalLM.

    python3 examples/hf_swap.py --backend torch                       # CPU, no GPU needed
    python3 examples/hf_swap.py --backend mok --style deepseek_v3     # one GPU"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import mok  # noqa: E402


def tiny_model(style, backend):
    """A random model of the style; sizes are multiples of 128 for the mok backend's kernels."""
    import transformers
    torch.manual_seed(0)
    h = 128 if backend == "mok" else 64
    common = dict(vocab_size=256, hidden_size=h, intermediate_size=2 * h, moe_intermediate_size=h,
                  num_hidden_layers=2, num_attention_heads=4, num_experts_per_tok=2)
    if style == "qwen3_moe":
        return transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(
            num_key_value_heads=2, head_dim=h // 4, num_experts=8, norm_topk_prob=True,
            decoder_sparse_step=1, mlp_only_layers=[], **common))
    return transformers.DeepseekV3ForCausalLM(transformers.DeepseekV3Config(
        num_key_value_heads=4, n_routed_experts=8, n_group=4, topk_group=2, n_shared_experts=1,
        first_k_dense_replace=1, q_lora_rank=None, kv_lora_rank=32, qk_rope_head_dim=16,
        qk_nope_head_dim=16, v_head_dim=16, routed_scaling_factor=2.5, **common))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", choices=("mok", "torch"), default="torch")
    ap.add_argument("--style", choices=("qwen3_moe", "deepseek_v3"), default="qwen3_moe")
    ap.add_argument("--model", help="a checkpoint folder or hub name (default: a tiny random model)")
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    device = torch.device("cuda" if args.backend == "mok" else "cpu")
    if args.model:
        import transformers
        model = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16)
    else:
        model = tiny_model(args.style, args.backend)
    model = model.to(device).eval()
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (2, 32), generator=torch.Generator().manual_seed(1)).to(device)
    with torch.no_grad():
        before = model(ids).logits.float()
    names = mok.swap_hf_moe_blocks(model, backend=args.backend)
    with torch.no_grad():
        after = model(ids).logits.float()
    err = ((after - before).abs().max() / before.abs().max()).item()
    print(f"{type(model).__name__}: {len(names)} MoE blocks now mok.MoE (backend {args.backend}); "
          f"logits max relative difference {err:.2e}")
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = torch.randint(0, vocab, (4, 33), generator=torch.Generator().manual_seed(2)).to(device)
    for step in range(args.steps):
        loss = model(data, labels=data).loss
        opt.zero_grad()
        (loss + mok.router_losses(model).to(loss.device)).backward()
        opt.step()
        print(f"step {step:3d}  loss {loss.item():.4f}", flush=True)
    if args.backend == "mok":
        mok.destroy_groups()


if __name__ == "__main__":
    main()
