"""Catalog data (hardware, models, decode profiles) and the loaders that validate it."""

from vllm_fleet.catalog.hardware import Hardware, hardware_catalog, load_hardware
from vllm_fleet.catalog.models import ModelArch, load_model, load_model_config, model_catalog

__all__ = [
    "Hardware",
    "ModelArch",
    "hardware_catalog",
    "load_hardware",
    "load_model",
    "load_model_config",
    "model_catalog",
]
