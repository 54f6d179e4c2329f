"""Optional CPU fast paths and the cost measurement that prices them.

kernels (oneDNN Linear), quantize (weight-only int8), native (specbench's own int8 kernel,
built once per machine), lean_step (a draft step without HF's per-layer plumbing),
draft_vocab (RestrictedStep: the model drafter's draft step over part of the vocabulary,
through the lean step), costs (c, v(k), u(n)).
Everything here changes how fast a forward runs, never what it computes beyond rounding;
core/ never imports it, and the model drafter takes it only as a draft step
(drafters/step.py) that make_drafter plugs in.
"""
