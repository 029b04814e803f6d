#!/usr/bin/env bash
# wgrad_ncu.sh — one launch of the BF16 weight gradient (bf16 out) under Nsight Compute, through
# dev/gg_ncu.sh: throughputs (shared memory, L2, DRAM), the tensor pipe, the warps' stall
# reasons; to tell which of them holds the kernel (docs/PERF.md "Open gaps"). SHAPES picks
# dev/wgrad_ab.py's shapes (default dsv3_ep1_down). Report and text under $OUT.
set -u
LOG=${OUT:-/tmp/mok_out} SHAPES=${SHAPES:-dsv3_ep1_down} KERNEL=gg_bf16_wgrad_kernel \
  SCRIPT=dev/wgrad_ab.py exec bash "$(dirname "$0")/gg_ncu.sh"
