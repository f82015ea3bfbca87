"""Hopper (sm_90) forward written in Pallas Mosaic GPU: ``forward.forward``."""
