# device_env.sh — sourced by the GPU-machine scripts (bench/ep2_targets.sh, bench/run_device_all.sh)
# after they set BUILD: NVLink multicast off in NCCL, torch and NVSHMEM; the PyTorch wheel's NCCL
# first on the library path (the one mok is built against there); mok's library and Python package
# from this checkout.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
nccl=$(python3 -c "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])")
export LD_LIBRARY_PATH="$nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MOK_LIBRARY="$PWD/$BUILD/libmok.so" PYTHONPATH="$PWD/python"
