"""Switching dlscope on where people already train: PyTorch Lightning's ``Trainer(profiler=...)``
(:mod:`.lightning`) and the Hugging Face ``Trainer(callbacks=[...])`` (:mod:`.huggingface`).
Each imports its framework only when used."""
