"""cuda-agent: train and run LLM agents that write fast, verified CUDA kernels."""

__version__ = "0.1.0"
