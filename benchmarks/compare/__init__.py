"""Before/after comparisons of two commits, each run from a worktree of its own."""
