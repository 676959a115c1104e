"""Data quality: archive completeness, streaming-vs-batch comparison and the asset checks on them."""
