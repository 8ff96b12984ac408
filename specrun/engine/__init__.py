"""The speculative-decoding engine: llama.cpp wrapper, sampling, drafters, verification, the loop."""
