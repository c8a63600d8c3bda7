"""kvplan: plan the GPU memory that LLM inference spends on the KV cache.

The core (this package, minus ``kvplan.ui``) imports no Streamlit, Plotly or kaleido.
"""

__version__ = "0.1.0"
