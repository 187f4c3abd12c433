// The one translation unit of ddp_torch_pch, the target that owns the tree's
// precompiled LibTorch header (worker/CMakeLists.txt); it defines nothing.
