"""Streamlit dashboard pieces: sidebar/URL state, pure data builders, plotly charts, views."""
