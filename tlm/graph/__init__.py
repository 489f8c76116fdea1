"""Stage 1, graph: a model becomes the tuning tasks (fused subgraphs) of a target.

zoo name | torch.nn.Module | .onnx  --importer-->  ImportedModel (Relax)  --extract-->  [Task]

- target.py     the TVM target of this host or a named GPU (`TargetInfo`: ISA, cores, key)
- zoo.py        the workload zoo (Hugging Face configs, plain PyTorch in models/), train/test split
- importer.py   torch.export / ONNX -> Relax, with a reference implementation to check against
- specialize.py a model torch.export stops on (a size read from a tensor) traced on its example inputs, checked
- layout.py     conv layout: zero pads folded into convs, 2-D convs in NHWC, 1-D in NWC (the measured default)
- passes.py     tlm's Relax passes (fast math, epilogues across reshapes, pre-packed weights) and the fusion pass list
- widths.py     odd matmul widths (no factor of 8) computed as a round part and a padded tail
- extract.py    MetaSchedule's fusion passes, task extraction, the on-disk task cache, hold-out
- tasks.py      the `Task` record every later stage works on
"""
