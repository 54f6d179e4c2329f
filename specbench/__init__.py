"""specbench: speculative decoding you can watch and measure."""

__version__ = "0.1.0"
