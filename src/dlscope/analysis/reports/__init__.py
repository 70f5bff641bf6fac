"""One module per registered report (``dlscope stats --report NAME``): ``REPORT`` and its ``compute``."""
