"""Quality benchmarks: acceptance rules and prompts, speed against chrF++."""
