"""Models: specs, ONE pair loader (with progress), the embedded default pair, prompt encoding.

    specs.py     what a model spec, a drafter spec, a device or a kernels name means
    options.py   the pair options' defaults (imports nothing: the CLI's signatures read them)
    dtypes.py    dtype names and what "auto" stands for on a device
    loading.py   load_pair: PairConfig, the target and its drafters, kernels
    model.py     load_model: one model from a spec, its tokenizer
    pairing.py   the vocabulary check, translation through text, EOS ids
    progress.py  the progress callback loading reports through
    defaults.py  the embedded default pair, assembled from its packages and cached
    build.py     a quantized model built one tensor at a time from a GGUF or safetensors source
    prepare.py   every quantized model prepared once into the cache; prepared.py its file
    text.py      encode_prompt (the one prompt rule) and TextStream
    run.py       generation settings and the gamma policy from user values; run_generation

Callers import each name from the module that defines it
(`from specbench.models.loading import load_pair`). The package itself imports nothing, so
that `specbench --help` and the embedded pair's status load only the modules they use.
"""
