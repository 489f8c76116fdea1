"""Stage 6, compiler: a whole model, built with each task's chosen record, checked and timed.

ImportedModel + database  --build-->  CompiledModel (checked against PyTorch / ONNX Runtime)

- build.py   apply the records, build with Relax, check the output, time against PyTorch and ORT
- cold_pick.py the final pick: each heavy task's best records re-timed cold on the model's threads,
             kept where the whole model runs faster
- contenders.py PyTorch eager and ONNX Runtime on the same inputs, one timer for all
- pack.py    convolution weights packed at compile time in the order the tuned program reads them
- job.py     the main job: `tlm compile` and `tlm.compile`, tuning with the TLM first on a budget
- backend.py `torch.compile(m, backend="tlm")` (checked, eager where tlm cannot) and `tlm.load`
- gpu_plan.py  `tlm gpu plan`: a whole model's GPU kernels in order, as data, for a machine without TVM
- plan_walk.py the plan's walk of the lowered Relax `main`, its data, and its CPU executor (tests)
"""
