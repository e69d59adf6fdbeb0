"""Task synthesis: crawl PyTorch operators, compose them into tasks, filter, decontaminate, write.

    from cuda_agent.synth.pipeline import SynthConfig, synthesize
    synthesize(SynthConfig(num=300, out="data/synth", backend="cpu", kernelbench="../shared/kernelbench"))

or `cuda-agent synth --num N --out DIR`. See docs/synthesis.md.
"""
