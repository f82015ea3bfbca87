"""pallas_flash: FlashAttention for JAX as Pallas GPU kernels."""
from pallas_flash import fp8
from pallas_flash.api import flash_attention
from pallas_flash.dropout import dropout_mask
from pallas_flash.triton.config import TritonConfig
from pallas_flash.masks import MASKED_LSE
from pallas_flash.mosaic.config import MosaicBackwardConfig, MosaicConfig
from pallas_flash.ring import ring_attention, zigzag
from pallas_flash.ulysses import ulysses_attention

__all__ = ["flash_attention", "fp8", "dropout_mask", "ring_attention", "zigzag",
           "ulysses_attention", "TritonConfig",
           "MosaicConfig", "MosaicBackwardConfig", "MASKED_LSE"]
__version__ = "0.1.0"
