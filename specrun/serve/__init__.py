"""The OpenAI-compatible server: requests decoded together, speculation budgeted across them."""
