"""LLM clients, for every layer that calls a model (the agent's loop, synthesis' LLM composer, bench's
agent runs): one call = conversation (+ tool schemas) in, one assistant message out; `make_client`
picks the client from the command line's options.

Below `agent` and `synth` (it imports nothing of cuda_agent), so both may use it.
"""

from cuda_agent.llm.client import (ChatClient, ClientError, Completion, ContextLengthError, OpenAIClient,
                                   TransformersClient)
from cuda_agent.llm.choice import make_client

__all__ = ["ChatClient", "ClientError", "Completion", "ContextLengthError", "OpenAIClient", "TransformersClient",
           "make_client"]
