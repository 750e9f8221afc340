"""Translation between dialects, pure: the turn and its stages at the core, a package per direction."""
