"""train_tiny_moe_lm.py — a tiny MoE language model (embedding, causal attention + mok.MoE blocks,
LM head) trained on synthetic sequences (a fixed random permutation chain with noise), with the MoE layers run by mok or by the plain-PyTorch
reference backend. Data parallel over all ranks, experts sharded over them (expert parallel):
mok.sync_gradients averages the replicated gradients and divides the expert gradients (already
summed over every rank's tokens by the layer's backward) by the world size. --aux-loss adds the
router's load-balancing loss; --bias-update runs DeepSeek-V3's auxiliary-loss-free balancing
(sigmoid scores, a per-expert bias on the choice moved after every step against the global load).

    torchrun --nproc_per_node=2 examples/train_tiny_moe_lm.py --backend mok --steps 50
    torchrun --nproc_per_node=2 examples/train_tiny_moe_lm.py --backend torch --steps 50
    python3 examples/train_tiny_moe_lm.py --backend torch --device cpu --steps 20   # no GPU

The same --seed gives both backends the same initialization and the same batches."""
import argparse
import math
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import mok  # noqa: E402


class Block(nn.Module):
    """x + attention(norm(x)), then x + MoE(norm(x))."""

    def __init__(self, hidden, heads, moe_kwargs, device):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.RMSNorm(hidden, device=device)
        self.qkv = nn.Linear(hidden, 3 * hidden, bias=False, device=device)
        self.proj = nn.Linear(hidden, hidden, bias=False, device=device)
        self.norm2 = nn.RMSNorm(hidden, device=device)
        self.moe = mok.MoE(hidden, device=device, **moe_kwargs)

    def forward(self, x):
        B, S, H = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(B, S, 3, self.heads, H // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(B, S, H))
        return x + self.moe(self.norm2(x))


class TinyMoELM(nn.Module):
    def __init__(self, vocab, hidden, layers, heads, moe_kwargs, device=None):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden, device=device)
        self.blocks = nn.ModuleList(Block(hidden, heads, moe_kwargs, device) for _ in range(layers))
        self.norm = nn.RMSNorm(hidden, device=device)
        self.head = nn.Linear(hidden, vocab, bias=False, device=device)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def add_model_args(ap):
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--intermediate", type=int, default=128)
    ap.add_argument("--shared", type=int, default=128, help="shared expert size (0: none)")
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8, help="sequences per rank and step")
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--aux-loss", type=float, default=0.0, help="load-balancing loss coefficient")
    ap.add_argument("--bias-update", type=float, default=0.0,
                    help="DeepSeek-V3 bias update rate (0: off; on: sigmoid routing with a bias)")
    return ap


def build_model(args, backend, device):
    """The model with the given MoE backend; the same seed gives the same weights on every
    backend (and the replicated weights the same on every rank)."""
    torch.manual_seed(args.seed)
    moe_kwargs = dict(intermediate_size=args.intermediate, num_experts=args.experts, top_k=args.top_k,
                      shared_intermediate_size=args.shared, norm_topk_prob=True, backend=backend,
                      aux_loss_coef=args.aux_loss)
    if args.bias_update > 0:
        moe_kwargs.update(scoring="sigmoid", score_correction_bias=True)
    return TinyMoELM(args.vocab, args.hidden, args.layers, args.heads, moe_kwargs, device)


def batch(args, step, rank, device):
    """Synthetic sequences: each next token is a fixed random permutation of the current one with
    probability 0.9, else uniform (the best loss is about 0.9 nats at vocab 256). Deterministic in
    (seed, step, rank)."""
    perm = torch.randperm(args.vocab, generator=torch.Generator().manual_seed(args.seed))
    g = torch.Generator().manual_seed(args.seed * 1000003 + step * 1009 + rank)
    cols = [torch.randint(0, args.vocab, (args.batch,), generator=g)]
    for _ in range(args.seq - 1):
        follow = torch.rand(args.batch, generator=g) < 0.9
        noise = torch.randint(0, args.vocab, (args.batch,), generator=g)
        cols.append(torch.where(follow, perm[cols[-1]], noise))
    return torch.stack(cols, dim=1).to(device)


def _world():
    return (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)


@torch.no_grad()
def update_routing_bias(model, rate):
    """DeepSeek-V3's auxiliary-loss-free balancing: after a step, every layer's bias moves by rate
    toward the experts that got fewer tokens than the mean (over all ranks) and away from those
    that got more."""
    for m in model.modules():
        if isinstance(m, mok.MoE) and m.e_score_correction_bias is not None and m.last_stats is not None:
            load = m.last_stats.tokens_per_expert.float()
            if dist.is_initialized():
                dist.all_reduce(load)
            m.e_score_correction_bias.add_(rate * torch.sign(load.mean() - load))


def train(model, args, device, log=print):
    """args.steps AdamW steps; returns the loss of every step, averaged over ranks."""
    rank, world = _world()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    losses = []
    for step in range(args.steps):
        tokens = batch(args, step, rank, device)
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        (loss + mok.router_losses(model).to(loss.device)).backward()
        mok.sync_gradients(model)
        opt.step()
        if args.bias_update > 0:
            update_routing_bias(model, args.bias_update)
        value = loss.detach().clone()
        if world > 1:
            dist.all_reduce(value)
        value = value.item() / world
        if not math.isfinite(value):
            raise FloatingPointError(f"loss is {value} at step {step}")
        losses.append(value)
        if rank == 0 and args.log_every and (step % args.log_every == 0 or step == args.steps - 1):
            log(f"step {step:4d}  loss {value:.4f}")
    return losses


def setup(device_arg):
    """Initializes torch.distributed under torchrun (NCCL on GPUs); returns the device."""
    for key in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
        os.environ.setdefault(key, "1" if key != "NCCL_NVLS_ENABLE" else "0")
    if device_arg == "cpu":
        if "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1:
            dist.init_process_group("gloo")
        return torch.device("cpu")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    if "WORLD_SIZE" in os.environ:
        dist.init_process_group("nccl", device_id=device)
    return device


def main():
    ap = add_model_args(argparse.ArgumentParser(description=__doc__.split("\n")[0]))
    ap.add_argument("--backend", choices=("mok", "torch"), default="mok")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args = ap.parse_args()
    if args.device == "cpu" and args.backend == "mok":
        ap.error("the mok backend runs on GPUs; use --backend torch with --device cpu")
    device = setup(args.device)
    rank, world = _world()
    model = build_model(args, args.backend, device)
    if rank == 0:
        print(f"backend {args.backend}, {world} rank(s), {args.steps} steps, "
              f"{sum(p.numel() for p in model.parameters())} parameters on rank 0")
    losses = train(model, args, device)
    if rank == 0:
        print(f"final loss {losses[-1]:.4f} (first {losses[0]:.4f})")
    if args.backend == "mok":
        mok.destroy_groups()
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
