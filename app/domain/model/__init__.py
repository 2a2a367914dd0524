"""The LLM being trained ("model" means an LLM here; the ORM is ``app.db.tables``).

What lives where (import from the module; this package exports nothing itself):

- ``architecture``: :class:`Architecture`, the record of every structural choice that changes the
  parameter count (a preset of ``data/architectures.toml`` or an imported config), and lookup by slug.
- ``counts``: exact parameter counts (per component, per layer kind, total and active per token, per
  pipeline stage) and the shape helpers the memory and FLOPs models use (q/kv/v widths, KV cache width).
- ``hf_config``: reading a Hugging Face ``config.json`` safely (supported ``model_type`` values, typed field
  access, size bounds) and :class:`ArchitectureImportError`.
- ``hf_families``: one reader per ``model_type`` family.
- ``hf_import``: :func:`architecture_from_hf_config`, the family table and "import as" for Llama-shaped
  configs.
- ``torch_shapes``: the exact parameter tensors of ``app/bench/model.py`` in module order.
"""
