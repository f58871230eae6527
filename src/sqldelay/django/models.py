"""No models: sqldelay keeps its own tables (made by ``migrate`` through the app's
post_migrate handler, see ``apps.py``). The module exists so that Django sends this app the
post_migrate signal."""
