"""archaudit: a static auditor of GPU-architecture gates in LLM-serving Python packages."""

__version__ = "0.1.0"
